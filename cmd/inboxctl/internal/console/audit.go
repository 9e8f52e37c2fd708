package console

import (
	"net/http"
	"slices"

	"github.com/pgbox/pgbox/admin"
)

// auditShown is how many records the audit page lists.
const auditShown = 200

// auditView is what the audit page shows.
type auditView struct {
	// Action, if set, keeps the records of that action.
	Action string
	// Actions are every action the log records, for the filter.
	Actions []admin.AuditAction
	// Limit is the most records the page lists.
	Limit int
	// Records are the records, newest first.
	Records []admin.AuditRecord
}

// audit lists operators' actions, newest first, from inboxctl, this
// console or any program using package admin.
func (c *Console) audit(w http.ResponseWriter, r *http.Request, t *Target) error {
	v := auditView{Action: r.FormValue("action"), Actions: admin.AuditActions(), Limit: auditShown}
	if v.Action != "" && !slices.Contains(v.Actions, admin.AuditAction(v.Action)) {
		return httpError(http.StatusBadRequest, "%q is not an action the audit log records: pick one from the list.", v.Action)
	}
	var err error
	v.Records, err = t.Admin.AuditLog(r.Context(), admin.AuditLogOptions{Action: admin.AuditAction(v.Action), Limit: auditShown})
	if err != nil {
		return err
	}
	return c.render(w, r, t, http.StatusOK, "audit", view{Title: "Audit log", Data: v})
}

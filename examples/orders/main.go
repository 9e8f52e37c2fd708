// Command orders is pgbox's complete example: an orders service, a payments
// service and a notifications service, each its own process with its own
// schema, talking through a broker, with a stand-in payment gateway and mail
// service. `orders demo` (what `make demo` runs) starts them all, puts them
// under load and faults, and proves that every order was charged once and
// mailed once. See README.md.
package main

import (
	"os"

	"github.com/pgbox/pgbox/examples/orders/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }

package recent

import (
	"crypto/sha256"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSetEvictsTheOldest(t *testing.T) {
	t.Parallel()
	s := New(3)
	for i := range 5 {
		s.Add(strconv.Itoa(i), sha256.Sum256([]byte{byte(i)}))
	}
	require.Equal(t, 3, s.Len())
	for i, want := range []bool{false, false, true, true, true} {
		h, ok := s.Get(strconv.Itoa(i))
		require.Equal(t, want, ok, "id %d", i)
		if ok {
			require.Equal(t, sha256.Sum256([]byte{byte(i)}), h)
		}
	}
	s.Add("4", Hash{}) // already held: neither replaced nor counted twice
	h, _ := s.Get("4")
	require.Equal(t, sha256.Sum256([]byte{4}), h)
	require.Equal(t, 3, s.Len())
}

func TestNilSetRemembersNothing(t *testing.T) {
	t.Parallel()
	s := New(0)
	require.Nil(t, s)
	s.Add("a", Hash{})
	_, ok := s.Get("a")
	require.False(t, ok)
	require.Zero(t, s.Len())
}

//go:build unix

package sim

import "syscall"

// descriptorLimit is the process's limit on open descriptors (Go raises
// the soft limit to the hard one at start), 0 when unknown.
func descriptorLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return uint64(lim.Cur)
}

//go:build solaris || illumos || aix

package rawio

import "syscall"

// Read reads the non-blocking socket fd. These platforms make system calls
// through libc, with no raw form: it is syscall.Read.
func Read(fd int, b []byte) (int, error) { return syscall.Read(fd, b) }

// Write writes b to the non-blocking socket fd: syscall.Write here (see Read).
func Write(fd int, b []byte) (int, error) { return syscall.Write(fd, b) }

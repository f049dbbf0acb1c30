//go:build unix && !linux && !solaris && !illumos && !aix

package rawio

import (
	"syscall"
	"unsafe"
)

// Read reads the non-blocking socket fd with a raw system call (see the
// package doc). It returns syscall.EAGAIN when the socket has no data.
func Read(fd int, b []byte) (int, error) { return rw(syscall.SYS_READ, fd, b) }

// Write writes b to the non-blocking socket fd with a raw system call. It
// returns syscall.EAGAIN when the socket has no room.
func Write(fd int, b []byte) (int, error) { return rw(syscall.SYS_WRITE, fd, b) }

// rw makes the read or write system call trap on fd with b.
func rw(trap uintptr, fd int, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

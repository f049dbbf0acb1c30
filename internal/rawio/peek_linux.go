package rawio

import (
	"syscall"
	"unsafe"
)

// Peek reads what the socket fd has to read into b without consuming it
// and without blocking (recvfrom with MSG_PEEK|MSG_DONTWAIT), with a raw
// system call (see the package doc): 0 and a nil error is the peer's
// close; syscall.EAGAIN, nothing to read yet.
func Peek(fd int, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

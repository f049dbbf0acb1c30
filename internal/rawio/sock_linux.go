package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peek reads what the socket fd has to read into b without consuming it
// and without blocking (recvfrom with MSG_PEEK|MSG_DONTWAIT), with a raw
// system call (see the package doc): 0 and a nil error is the peer's
// close; syscall.EAGAIN, nothing to read yet.
func Peek(fd int, b []byte) (int, error) {
	return recvfrom(fd, b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
}

// BytesAcked is how many bytes sent on the TCP socket fd its peer's stack
// has acknowledged (TCP_INFO's tcpi_bytes_acked, Linux 4.1 and later),
// read with a raw system call (see the package doc): getsockopt does not
// block.
func BytesAcked(fd int) (uint64, error) {
	var info unix.TCPInfo
	size := uint32(unix.SizeofTCPInfo)
	_, _, errno := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, uintptr(fd),
		syscall.IPPROTO_TCP, syscall.TCP_INFO,
		uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return 0, errno
	}
	return info.Bytes_acked, nil
}

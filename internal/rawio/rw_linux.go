package rawio

import (
	"syscall"
	"unsafe"
)

// Read reads the non-blocking socket fd with a raw system call (see the
// package doc). It returns syscall.EAGAIN when the socket has no data.
//
// The call is recvfrom(2) with no flags and no address, which on a
// connected socket is read(2) without the file layer in front of the
// socket: read(2) takes the file's position lock and runs a file's
// permission and notification hooks (vfs_read) before it reaches the
// socket, at every event (bench/README.md, seventeenth round).
func Read(fd int, b []byte) (int, error) { return recvfrom(fd, b, 0) }

// Write writes b to the non-blocking socket fd with a raw system call. It
// returns syscall.EAGAIN when the socket has no room. The call is
// sendto(2) with no flags and no address: write(2) without the file layer
// (see Read).
func Write(fd int, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// recvfrom reads the socket fd into b with flags, asking for no address.
func recvfrom(fd int, b []byte, flags int) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

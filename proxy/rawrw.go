//go:build unix && !solaris && !illumos && !aix

package proxy

import (
	"syscall"
	"unsafe"
)

// rawRead and rawWrite read and write a non-blocking socket with a raw
// system call, which does not tell Go's scheduler that the goroutine
// is in a system call: on a non-blocking socket it cannot block. A read or
// write through the net package does tell it (entersyscall), and Go's
// system monitor takes the processor of a goroutine it finds in a system
// call while other goroutines wait, hands it to another thread (a wake-up
// and a context switch), and each time it does so goes back to looking
// every 20 µs (runtime/proc.go: sysmon, retake). At a read and a write per
// event and thousands of streams, that was about a tenth of aguard's CPU
// and half its context switches (bench/README.md, "Raw reads and writes").
func rawRead(fd int, b []byte) (int, error) { return rawRW(syscall.SYS_READ, fd, b) }

// rawWrite: see rawRead.
func rawWrite(fd int, b []byte) (int, error) { return rawRW(syscall.SYS_WRITE, fd, b) }

// rawRW makes the read or write system call trap on fd with b.
func rawRW(trap uintptr, fd int, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

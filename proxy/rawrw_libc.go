//go:build solaris || illumos || aix

package proxy

import "syscall"

// rawRead and rawWrite: these platforms make system calls through libc,
// with no raw form; the net package's calls are used.
func rawRead(fd int, b []byte) (int, error) { return syscall.Read(fd, b) }

func rawWrite(fd int, b []byte) (int, error) { return syscall.Write(fd, b) }

//! The host side of a TCP flow: a connection the supervisor dialled, or one end of a socket
//! pair whose other end a service of the supervisor's own serves (the credential endpoints),
//! so that such a service is reachable from the jail alone, never from the host's network.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::task::{Context, Poll};
use tokio::net::{TcpStream, UnixStream};

pub(super) enum HostConn {
    Tcp(TcpStream),
    Local(UnixStream),
}

impl HostConn {
    pub(super) fn try_read(&self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            HostConn::Tcp(s) => s.try_read(b),
            HostConn::Local(s) => s.try_read(b),
        }
    }

    pub(super) fn try_write(&self, b: &[u8]) -> io::Result<usize> {
        match self {
            HostConn::Tcp(s) => s.try_write(b),
            HostConn::Local(s) => s.try_write(b),
        }
    }

    pub(super) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            HostConn::Tcp(s) => s.poll_read_ready(cx),
            HostConn::Local(s) => s.poll_read_ready(cx),
        }
    }

    pub(super) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            HostConn::Tcp(s) => s.poll_write_ready(cx),
            HostConn::Local(s) => s.poll_write_ready(cx),
        }
    }

    /// A reset rather than a FIN when the flow ends (the jail reset it); a local service is
    /// told by the end of its stream alone.
    pub(super) fn set_zero_linger(&self) -> io::Result<()> {
        match self {
            HostConn::Tcp(s) => s.set_zero_linger(),
            HostConn::Local(_) => Ok(()),
        }
    }
}

impl AsRawFd for HostConn {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            HostConn::Tcp(s) => s.as_raw_fd(),
            HostConn::Local(s) => s.as_raw_fd(),
        }
    }
}

//! How threads sleep and are woken: an eventfd to ring another thread's bell, and an epoll set
//! that waits on rings and bells at once with a nanosecond timeout (epoll_pwait2).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A bell another thread (or a signal handler) rings.
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> io::Result<Self> {
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(raw) } })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Rings it; async-signal-safe (one write).
    pub fn ring(&self) {
        ring_fd(self.fd());
    }

    /// Silences it, so that a level-triggered wait does not return for it again.
    pub fn clear(&self) {
        let mut n = 0u64;
        unsafe { libc::read(self.fd(), &mut n as *mut u64 as *mut libc::c_void, 8) };
    }
}

/// Rings the eventfd `fd` (for a signal handler, which holds only the number).
pub fn ring_fd(fd: RawFd) {
    let one = 1u64;
    unsafe { libc::write(fd, &one as *const u64 as *const libc::c_void, 8) };
}

/// Waits on a set of descriptors at once, each known by a token.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    pub fn new() -> io::Result<Self> {
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll { fd: unsafe { OwnedFd::from_raw_fd(raw) }, events: vec![libc::epoll_event { events: 0, u64: 0 }; 64] })
    }

    /// Wakes a wait while `fd` is readable (level-triggered), with `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        if unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits until a descriptor is readable or `timeout_ns` passes (None: for as long as it
    /// takes; Some(0): only looks); calls `ready` with each readable one's token. Returns
    /// whether any was.
    pub fn wait(&mut self, timeout_ns: Option<u64>, mut ready: impl FnMut(u64)) -> bool {
        let ts = timeout_ns.map(|ns| libc::timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 });
        let tp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // epoll_pwait2 (Linux 5.11): a timeout in nanoseconds, where epoll_wait's is in ms.
        let n = unsafe {
            libc::syscall(libc::SYS_epoll_pwait2, self.fd.as_raw_fd(), self.events.as_mut_ptr(), self.events.len() as libc::c_int, tp, std::ptr::null::<libc::sigset_t>(), 0usize)
        };
        if n <= 0 {
            return false; // the timeout, or a signal
        }
        for ev in &self.events[..n as usize] {
            ready(ev.u64);
        }
        true
    }
}

/// Sleeps `ns` deaf to everything, as a worker sleeps within a link's delay (and `--timer`).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 };
    unsafe { libc::ppoll(std::ptr::null_mut(), 0, &ts, std::ptr::null()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bell_wakes_a_wait_until_it_is_cleared() {
        let mut ep = Epoll::new().unwrap();
        let bell = EventFd::new().unwrap();
        ep.add(bell.fd(), 7).unwrap();
        let mut got = Vec::new();
        assert!(!ep.wait(Some(1_000_000), |t| got.push(t)));
        bell.ring();
        assert!(ep.wait(None, |t| got.push(t)));
        assert!(ep.wait(Some(0), |t| got.push(t))); // level-triggered: still rung
        bell.clear();
        assert!(!ep.wait(Some(0), |t| got.push(t)));
        assert_eq!(got, [7, 7]);
    }

    #[test]
    fn a_wait_times_out_to_the_nanosecond_it_was_given() {
        let mut ep = Epoll::new().unwrap();
        let t0 = std::time::Instant::now();
        ep.wait(Some(300_000), |_| {});
        let took = t0.elapsed().as_nanos();
        assert!(took >= 300_000, "{took}"); // epoll_wait's millisecond would round this to 0 or 1 ms
    }
}

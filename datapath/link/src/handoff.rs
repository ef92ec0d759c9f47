//! Frames handed from one worker to another: a switch forwards a frame to a link direction that
//! another worker serves. The frame's buffer moves, it is not copied, through a lock-free
//! bounded queue; the receiving worker is woken only if it sleeps listening.

use std::sync::atomic::{AtomicBool, Ordering};

use bloatlab_core::Instant;
use crossbeam_queue::ArrayQueue;

use crate::wake::EventFd;

/// A frame due to arrive at a direction (by its index in the receiving worker) at `at`.
pub struct Handoff {
    pub at: Instant,
    pub dir: usize,
    pub data: Vec<u8>,
}

/// A worker's queue of frames from the others.
pub struct Inbox {
    queue: ArrayQueue<Handoff>,
    /// Set while the worker sleeps listening; a sender then rings `bell`.
    sleeping: AtomicBool,
    pub bell: EventFd,
}

/// As many frames as a ring holds: a worker far behind loses frames here, counted, rather than
/// holding every sender up.
const CAPACITY: usize = 8192;

impl Inbox {
    pub fn new() -> std::io::Result<Self> {
        Ok(Inbox { queue: ArrayQueue::new(CAPACITY), sleeping: AtomicBool::new(false), bell: EventFd::new()? })
    }

    /// Hands a frame over; gives it back if the queue is full.
    pub fn send(&self, h: Handoff) -> Result<(), Handoff> {
        self.queue.push(h)?;
        // SeqCst on both sides: either the receiver sees the frame before it sleeps, or this
        // sees it sleeping and rings.
        if self.sleeping.load(Ordering::SeqCst) {
            self.bell.ring();
        }
        Ok(())
    }

    pub fn take(&self) -> Option<Handoff> {
        self.queue.pop()
    }

    /// Before a listening sleep: false if a frame came meanwhile (then do not sleep).
    pub fn going_to_sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        if !self.queue.is_empty() {
            self.sleeping.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

//! Asynchronous events (IBTA vol. 1 §11.6.3, `ibv_get_async_event(3)`).

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// An asynchronous event, with the object it concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A CQ overflowed or failed (`IBV_EVENT_CQ_ERR`, §11.6.3.3); the CQ is unusable.
    CqErr {
        /// The CQ's identity.
        cq: u32,
    },
    /// A QP met an error that is no one request's fault (`IBV_EVENT_QP_FATAL`).
    QpFatal {
        /// QP number.
        qpn: u32,
    },
    /// A responder saw an invalid request (`IBV_EVENT_QP_REQ_ERR`).
    QpReqErr {
        /// QP number.
        qpn: u32,
    },
    /// A responder saw an access violation (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessErr {
        /// QP number.
        qpn: u32,
    },
    /// The first packet arrived on a QP in RTR (`IBV_EVENT_COMM_EST`, §11.6.3.1).
    CommEst {
        /// QP number.
        qpn: u32,
    },
    /// The send queue of a QP in SQD has drained (`IBV_EVENT_SQ_DRAINED`).
    SqDrained {
        /// QP number.
        qpn: u32,
    },
    /// The port became active (`IBV_EVENT_PORT_ACTIVE`).
    PortActive {
        /// Port number (1).
        port: u8,
    },
    /// An SRQ fell below its armed limit (`IBV_EVENT_SRQ_LIMIT_REACHED`, §10.2.9.2).
    SrqLimitReached {
        /// The SRQ's identity.
        srq: u32,
    },
    /// A QP attached to an SRQ in the error state will consume no more WQEs
    /// (`IBV_EVENT_QP_LAST_WQE_REACHED`, §10.2.9.5).
    QpLastWqeReached {
        /// QP number.
        qpn: u32,
    },
}

impl AsyncEvent {
    /// The `enum ibv_event_type` number of this event.
    pub fn event_type(&self) -> u32 {
        match self {
            AsyncEvent::CqErr { .. } => 0,
            AsyncEvent::QpFatal { .. } => 1,
            AsyncEvent::QpReqErr { .. } => 2,
            AsyncEvent::QpAccessErr { .. } => 3,
            AsyncEvent::CommEst { .. } => 4,
            AsyncEvent::SqDrained { .. } => 5,
            AsyncEvent::PortActive { .. } => 9,
            AsyncEvent::SrqLimitReached { .. } => 15,
            AsyncEvent::QpLastWqeReached { .. } => 16,
        }
    }
}

impl AsyncEvent {
    /// The QP number of an event about a QP, `None` for CQ, SRQ and port events.
    pub fn qpn(&self) -> Option<u32> {
        match *self {
            AsyncEvent::QpFatal { qpn }
            | AsyncEvent::QpReqErr { qpn }
            | AsyncEvent::QpAccessErr { qpn }
            | AsyncEvent::CommEst { qpn }
            | AsyncEvent::SqDrained { qpn }
            | AsyncEvent::QpLastWqeReached { qpn } => Some(qpn),
            AsyncEvent::CqErr { .. }
            | AsyncEvent::PortActive { .. }
            | AsyncEvent::SrqLimitReached { .. } => None,
        }
    }
}

/// libibverbs' event name and the object in hex, as the rest of uroce prints numbers:
/// "local work queue catastrophic error (IBV_EVENT_QP_FATAL) on QP 0x00012a".
impl fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, name) = match self {
            AsyncEvent::CqErr { .. } => ("CQ error", "IBV_EVENT_CQ_ERR"),
            AsyncEvent::QpFatal { .. } => {
                ("local work queue catastrophic error", "IBV_EVENT_QP_FATAL")
            }
            AsyncEvent::QpReqErr { .. } => (
                "invalid request local work queue error",
                "IBV_EVENT_QP_REQ_ERR",
            ),
            AsyncEvent::QpAccessErr { .. } => (
                "local access violation work queue error",
                "IBV_EVENT_QP_ACCESS_ERR",
            ),
            AsyncEvent::CommEst { .. } => ("communication established", "IBV_EVENT_COMM_EST"),
            AsyncEvent::SqDrained { .. } => ("send queue drained", "IBV_EVENT_SQ_DRAINED"),
            AsyncEvent::PortActive { .. } => ("port active", "IBV_EVENT_PORT_ACTIVE"),
            AsyncEvent::SrqLimitReached { .. } => {
                ("SRQ limit reached", "IBV_EVENT_SRQ_LIMIT_REACHED")
            }
            AsyncEvent::QpLastWqeReached { .. } => {
                ("last WQE reached", "IBV_EVENT_QP_LAST_WQE_REACHED")
            }
        };
        write!(f, "{what} ({name}) on ")?;
        match *self {
            AsyncEvent::CqErr { cq } => write!(f, "CQ {cq:#x}"),
            AsyncEvent::SrqLimitReached { srq } => write!(f, "SRQ {srq:#x}"),
            AsyncEvent::PortActive { port } => write!(f, "port {port}"),
            AsyncEvent::QpFatal { qpn }
            | AsyncEvent::QpReqErr { qpn }
            | AsyncEvent::QpAccessErr { qpn }
            | AsyncEvent::CommEst { qpn }
            | AsyncEvent::SqDrained { qpn }
            | AsyncEvent::QpLastWqeReached { qpn } => write!(f, "QP {qpn:#08x}"),
        }
    }
}

/// Something that wants to know when an event is queued (the verbs layer wakes a file
/// descriptor with it).
pub trait EventSink: Send + Sync {
    /// Called after an event was queued.
    fn notify(&self);
}

/// The FIFO of asynchronous events of one device.
#[derive(Default)]
pub struct EventQueue {
    queue: Mutex<VecDeque<AsyncEvent>>,
    sink: Mutex<Option<Arc<dyn EventSink>>>,
}

impl fmt::Debug for EventQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventQueue")
            .field("queue", &*self.queue.lock())
            .finish_non_exhaustive()
    }
}

impl EventQueue {
    /// Queues an event and tells the sink.
    pub fn push(&self, ev: AsyncEvent) {
        self.queue.lock().push_back(ev);
        let sink = self.sink.lock().clone();
        if let Some(s) = sink {
            s.notify();
        }
    }

    /// Takes the oldest event, if any.
    pub fn pop(&self) -> Option<AsyncEvent> {
        self.queue.lock().pop_front()
    }

    /// Takes every queued event of QP `qpn`, oldest first, and leaves the others queued in
    /// their order: a test or a scenario that owns one QP reads its events without
    /// draining those of other QPs ([`crate::qp::QueuePair::take_events`]).
    pub fn take_qp(&self, qpn: u32) -> Vec<AsyncEvent> {
        let mut q = self.queue.lock();
        let (mine, rest): (VecDeque<_>, VecDeque<_>) =
            q.drain(..).partition(|e| e.qpn() == Some(qpn));
        *q = rest;
        mine.into()
    }

    /// Number of queued events.
    pub fn len(&self) -> usize {
        self.queue.lock().len()
    }

    /// True when no event is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Installs the sink told of every later event; it is told once at once if events are
    /// already queued.
    pub fn set_sink(&self, sink: Arc<dyn EventSink>) {
        *self.sink.lock() = Some(sink.clone());
        if !self.is_empty() {
            sink.notify();
        }
    }
}

#[cfg(test)]
mod display_tests {
    use super::{AsyncEvent, EventQueue};

    #[test]
    fn take_qp_takes_one_qps_events_and_keeps_the_rest_in_order() {
        let q = EventQueue::default();
        q.push(AsyncEvent::CommEst { qpn: 1 });
        q.push(AsyncEvent::CommEst { qpn: 2 });
        q.push(AsyncEvent::CqErr { cq: 1 });
        q.push(AsyncEvent::QpFatal { qpn: 1 });
        assert_eq!(
            q.take_qp(1),
            [
                AsyncEvent::CommEst { qpn: 1 },
                AsyncEvent::QpFatal { qpn: 1 }
            ]
        );
        assert_eq!(q.pop(), Some(AsyncEvent::CommEst { qpn: 2 }));
        assert_eq!(q.pop(), Some(AsyncEvent::CqErr { cq: 1 }));
        assert!(q.take_qp(1).is_empty() && q.is_empty());
    }

    #[test]
    fn events_print_libibverbs_names_and_hex_numbers() {
        assert_eq!(
            AsyncEvent::QpFatal { qpn: 0x12a }.to_string(),
            "local work queue catastrophic error (IBV_EVENT_QP_FATAL) on QP 0x00012a"
        );
        assert_eq!(
            AsyncEvent::SrqLimitReached { srq: 31 }.to_string(),
            "SRQ limit reached (IBV_EVENT_SRQ_LIMIT_REACHED) on SRQ 0x1f"
        );
    }
}

//! The simulated fabric as a [`Backend`]: devices that verbs programs open on it talk
//! through a [`Fabric`] instead of sockets, with its virtual clock and its seeded faults.
//!
//! The fabric has no thread of its own. The driver of every device opened on it is a
//! polled one: each [`Driver::progress`] call (the verbs layer makes one from `poll_cq`
//! and `post_send`) runs one [`Fabric::step`], which sends what every device has queued,
//! advances virtual time to the next delivery or timer, delivers and fires what is due.
//! So a program that polls its completion queue drives the whole fabric, and a run is
//! deterministic for a given seed when one thread drives it.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Fabric, SimError};
use crate::backend::{Backend, BackendError, Driver, Opened};
use crate::device::DeviceConfig;
use crate::limits::DeviceLimits;

/// A backend whose devices are nodes of one shared simulated [`Fabric`].
///
/// ```
/// use uroce_provider::backend::Backend;
/// use uroce_provider::device::DeviceConfig;
/// use uroce_provider::limits::DeviceLimits;
/// use uroce_provider::sim::{Fabric, SimBackend};
///
/// let sim = SimBackend::new(Fabric::new(7));
/// let a = sim.open(DeviceConfig::new("a", "10.0.0.1".parse().unwrap()), DeviceLimits::DEFAULT).unwrap();
/// assert!(!a.driver.expect("polled driver").is_threaded());
/// // An address can only be opened once, as on a real network.
/// assert!(sim.open(DeviceConfig::new("b", "10.0.0.1".parse().unwrap()), DeviceLimits::DEFAULT).is_err());
/// ```
#[derive(Clone)]
pub struct SimBackend {
    fabric: Arc<Mutex<Fabric>>,
}

impl SimBackend {
    /// A backend over `fabric` (configure its links first, or through [`SimBackend::fabric`]).
    pub fn new(fabric: Fabric) -> SimBackend {
        SimBackend {
            fabric: Arc::new(Mutex::new(fabric)),
        }
    }

    /// The fabric, for link settings, statistics and the virtual clock. Do not hold the
    /// lock while calling verbs on devices of this fabric.
    pub fn fabric(&self) -> &Arc<Mutex<Fabric>> {
        &self.fabric
    }
}

impl fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimBackend").finish_non_exhaustive()
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    /// Adds a device with `config` to the fabric. The limits are the device defaults
    /// ([`DeviceLimits::DEFAULT`]); `limits` is ignored. Fails with
    /// [`BackendError::Config`] when another device of the fabric has the address.
    fn open(&self, config: DeviceConfig, _limits: DeviceLimits) -> Result<Opened, BackendError> {
        let device = self
            .fabric
            .lock()
            .try_add_device(config)
            .map_err(|e| match e {
                SimError::AddressInUse(_) => {
                    BackendError::Config("another device of the simulated fabric has this address")
                }
                _ => BackendError::Config("the simulated fabric refused the device"),
            })?;
        Ok(Opened {
            device,
            driver: Some(Arc::new(SimDriver {
                fabric: self.fabric.clone(),
            })),
        })
    }
}

/// Drives the fabric one step per [`Driver::progress`] call.
struct SimDriver {
    fabric: Arc<Mutex<Fabric>>,
}

impl fmt::Debug for SimDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDriver").finish_non_exhaustive()
    }
}

impl Driver for SimDriver {
    fn progress(&self) {
        self.fabric.lock().step();
    }

    fn is_threaded(&self) -> bool {
        false
    }
}

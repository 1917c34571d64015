//! Address handles and address vectors (IBTA vol. 1 §10.2.2 and §11.2.2,
//! `ibv_create_ah(3)`).

use crate::device::{Device, Gid};
use crate::error::{Error, Resource, Result};
use crate::pd::ProtectionDomain;
use std::sync::Arc;

/// An address vector (`struct ibv_ah_attr` with its GRH), as RoCEv2 uses it: the GRH
/// fields become the IP header of the packet (annex A17.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination GID (the peer's IP address, IPv4-mapped for IPv4).
    pub dgid: Gid,
    /// Index of the source GID in the local GID table (0).
    pub sgid_index: u8,
    /// IPv6 flow label (20 bits); 0 lets uroce choose.
    pub flow_label: u32,
    /// IP TTL / hop limit.
    pub hop_limit: u8,
    /// IP traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Service level (0..=15).
    pub sl: u8,
    /// Local port (1).
    pub port_num: u8,
    /// A GRH is present; RoCE requires it (`is_global = 1`).
    pub is_global: bool,
}

impl Default for AhAttr {
    fn default() -> Self {
        AhAttr {
            dgid: Gid::default(),
            sgid_index: 0,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
            port_num: 1,
            is_global: true,
        }
    }
}

impl AhAttr {
    /// Checks the vector against `device`: port 1, a GRH, a known source GID index,
    /// a non-zero destination GID, a 20-bit flow label and SL in 0..=15.
    pub fn validate(&self, device: &Device) -> Result<(), &'static str> {
        if self.port_num != 1 {
            return Err("port_num must be 1: a uroce device has one port");
        }
        if !self.is_global {
            return Err("is_global must be set: RoCE addresses peers by GID, so a GRH is required");
        }
        if device.query_gid(1, self.sgid_index.into()).is_err() {
            return Err("sgid_index is outside the GID table (index 0 is the device address)");
        }
        if self.dgid.is_zero() {
            return Err(
                "dgid is zero; set it to the peer's GID (its IP address, IPv4-mapped for IPv4)",
            );
        }
        // RoCEv2 carries a packet in the IP version of its GIDs (annex A17.4.5.1): a device
        // bound to an IPv4 address cannot reach an IPv6 GID, nor the other way round.
        let (local, remote) = (device.config().addr, self.dgid.to_ip());
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(if local.is_ipv4() {
                "dgid is an IPv6 GID, but this device's address is IPv4: use a device on an IPv6 address"
            } else {
                "dgid is an IPv4-mapped GID, but this device's address is IPv6: use a device on an IPv4 address"
            });
        }
        if self.flow_label >= 1 << 20 {
            return Err("flow_label is wider than 20 bits");
        }
        if self.sl > 15 {
            return Err("sl must be 0..=15");
        }
        Ok(())
    }
}

/// An address handle: an address vector bound to a PD, for UD sends.
#[derive(Debug)]
pub struct AddressHandle {
    pd: Arc<ProtectionDomain>,
    attr: AhAttr,
}

impl AddressHandle {
    /// Creates an address handle (`ibv_create_ah(3)`).
    pub fn create(pd: &Arc<ProtectionDomain>, attr: AhAttr) -> Result<Arc<AddressHandle>> {
        attr.validate(pd.device()).map_err(Error::InvalidAh)?;
        pd.device().reserve(Resource::Ah)?;
        pd.add_user();
        Ok(Arc::new(AddressHandle {
            pd: pd.clone(),
            attr,
        }))
    }

    /// The address vector.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        self.pd.remove_user();
        self.pd.device().release(Resource::Ah);
    }
}

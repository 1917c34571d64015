//! `uroce devices`: the configured devices, in the manner of `ibv_devices` (`-l`) and
//! `ibv_devinfo`: name, address, port state, MTUs and GID table. Nothing is opened: the
//! active MTU comes from the MTU of the interface that owns the address (what the UDP
//! backend would use), without binding UDP port 4791.

use clap::Args;
use uroce_provider::backend::udp::interface_of;
use uroce_verbs::{devices, Device, Gid};
use uroce_wire::Mtu;

use crate::common::{device_for_addr, Fail};

/// Flags of `uroce devices`.
#[derive(Args, Debug, Clone)]
pub struct DevicesArgs {
    /// Only this device.
    #[arg(
        short = 'd',
        long = "ib-dev",
        value_name = "NAME",
        conflicts_with = "ip"
    )]
    pub dev: Option<String>,
    /// Only the device of this local address (configured or not).
    #[arg(long, value_name = "ADDR")]
    pub ip: Option<std::net::IpAddr>,
    /// Only the names and addresses, one line each (as `ibv_devices`).
    #[arg(short = 'l', long = "list")]
    pub list: bool,
}

/// Runs `uroce devices`.
pub fn run(args: &DevicesArgs) -> Result<(), Fail> {
    let all = devices().map_err(|e| format!("reading the device list: {e}"))?;
    let chosen: Vec<Device> = match (&args.dev, args.ip) {
        (Some(name), _) => vec![all
            .iter()
            .find(|d| d.name() == name)
            .cloned()
            .ok_or_else(|| format!("no device named {name:?}"))?],
        (None, Some(ip)) => vec![device_for_addr(&all, ip)],
        (None, None) => all,
    };
    if args.list {
        println!("    {:<16}\taddress", "device");
        println!("    {:<16}\t-------", "------");
        for d in &chosen {
            println!("    {:<16}\t{}", d.name(), d.addr());
        }
        return Ok(());
    }
    for d in &chosen {
        let iface = interface_of(d.addr()).ok().flatten();
        let (state, mtu, iface_text) = match &iface {
            Some(i) => {
                let mtu = Mtu::largest_for_ip_mtu(i.mtu as usize).unwrap_or(Mtu::Mtu1024);
                (
                    "PORT_ACTIVE (4)",
                    mtu,
                    format!("{} (MTU {})", i.name, i.mtu),
                )
            }
            None => (
                "PORT_DOWN (1)",
                Mtu::Mtu1024,
                "none: no interface has this address".to_string(),
            ),
        };
        let gid = Gid::from_ip(d.addr());
        println!("hca_id:\t{}", d.name());
        println!("\ttransport:\t\t\tRoCEv2 over UDP (uroce)");
        println!("\taddress:\t\t\t{}", d.addr());
        println!("\tinterface:\t\t\t{iface_text}");
        println!("\tphys_port_cnt:\t\t\t1");
        println!("\t\tport:\t1");
        println!("\t\t\tstate:\t\t\t{state}");
        println!("\t\t\tmax_mtu:\t\t{} ({})", mtu.bytes(), mtu.code());
        println!("\t\t\tactive_mtu:\t\t{} ({})", mtu.bytes(), mtu.code());
        println!("\t\t\tlink_layer:\t\tEthernet");
        println!("\t\t\tGID[  0]:\t\t{gid}, RoCE v2");
        println!();
    }
    Ok(())
}

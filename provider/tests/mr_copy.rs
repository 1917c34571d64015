//! Memory-region copies at every alignment agree with a plain byte-vector model, and a
//! partial-word write never disturbs the bytes around it (owned regions are accessed in
//! whole atomic words only).

use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use uroce_provider::device::{Device, DeviceConfig};
use uroce_provider::mr::MemoryRegion;
use uroce_provider::pd::ProtectionDomain;

fn region(len: usize) -> Arc<MemoryRegion> {
    let dev = Device::new(DeviceConfig::new("t", IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let pd = ProtectionDomain::alloc(&dev).expect("pd");
    MemoryRegion::alloc(&pd, len, 0).expect("mr")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn copies_match_a_byte_model(
        len in 1usize..100,
        ops in prop::collection::vec((0usize..100, prop::collection::vec(any::<u8>(), 0..40)), 1..20),
    ) {
        let mr = region(len);
        let mut model = vec![0u8; len];
        for (off, data) in ops {
            let fits = off + data.len() <= len;
            prop_assert_eq!(mr.write(off as u64, &data).is_ok(), fits);
            if fits {
                model[off..off + data.len()].copy_from_slice(&data);
            }
            for start in 0..len {
                let mut out = vec![0u8; len - start];
                mr.read(start as u64, &mut out).expect("in bounds");
                prop_assert_eq!(&out[..], &model[start..]);
            }
        }
    }
}

#[test]
fn odd_sized_region_edges() {
    let mr = region(13);
    mr.write(5, &[1, 2, 3, 4, 5, 6, 7, 8])
        .expect("fits exactly");
    assert_eq!(mr.contents(), [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(mr.write(6, &[0; 8]).is_err(), "one byte past the end");
    let mut b = [0u8; 1];
    mr.read(12, &mut b).expect("last byte");
    assert_eq!(b, [8]);
}

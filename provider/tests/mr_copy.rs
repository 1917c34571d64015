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

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    /// The same model for memory registered with `register_raw`, at every alignment of the
    /// buffer: the bytes before the first aligned word, the whole words and the bytes after
    /// them are each copied correctly, and nothing outside the region is touched.
    #[test]
    fn raw_region_copies_match_a_byte_model(
        misalign in 0usize..8,
        len in 0usize..60,
        ops in prop::collection::vec((0usize..60, prop::collection::vec(any::<u8>(), 0..30)), 1..12),
    ) {
        let dev = Device::new(DeviceConfig::new("t", IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let pd = ProtectionDomain::alloc(&dev).expect("pd");
        // Backing words, so the buffer's alignment is chosen; 0xEE canaries around it.
        let mut backing = vec![0xEEEE_EEEE_EEEE_EEEEu64; 10];
        let base = backing.as_mut_ptr().cast::<u8>();
        // SAFETY: misalign + len <= 8 + 60 <= 80 bytes of `backing`.
        let ptr = unsafe { base.add(misalign) };
        // SAFETY: `ptr..ptr + len` lies in `backing`, which outlives `mr` (dropped below
        // before `backing` is read) and is not otherwise accessed meanwhile.
        let mr = unsafe { MemoryRegion::register_raw(&pd, ptr, len, 0) }.expect("mr");
        let mut model = vec![0xEEu8; len];
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
        drop(mr);
        let bytes: Vec<u8> = backing.iter().flat_map(|w| w.to_ne_bytes()).collect();
        prop_assert!(bytes[..misalign].iter().all(|&b| b == 0xEE));
        prop_assert!(bytes[misalign + len..].iter().all(|&b| b == 0xEE));
    }
}

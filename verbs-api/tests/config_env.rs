//! `devices()` reads `UROCE_DEVICES`, then the `UROCE_CONFIG` file, then the default.
//! One test only, so no other test of this binary sees the environment change.

use uroce_verbs::*;

#[test]
fn device_list_comes_from_env_then_file_then_default() {
    std::env::remove_var("UROCE_DEVICES");
    std::env::remove_var("UROCE_CONFIG");
    let names = |d: Vec<Device>| {
        d.iter()
            .map(|d| format!("{}={}", d.name(), d.addr()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(devices().unwrap()),
        ["uroce0=127.0.0.1", "uroce1=127.0.0.2"]
    );

    let path = std::env::temp_dir().join(format!("uroce-devices-{}", std::process::id()));
    std::fs::write(&path, "# lab\nlab0=192.0.2.7\nlab1=2001:db8::7\n").unwrap();
    std::env::set_var("UROCE_CONFIG", &path);
    assert_eq!(
        names(devices().unwrap()),
        ["lab0=192.0.2.7", "lab1=2001:db8::7"]
    );
    assert_eq!(
        device_by_name("lab1").unwrap().addr(),
        "2001:db8::7".parse::<std::net::IpAddr>().unwrap()
    );
    assert!(matches!(
        device_by_name("uroce0"),
        Err(VerbsError::NoSuchDevice(_))
    ));

    std::env::set_var("UROCE_DEVICES", "env0=10.9.8.7");
    assert_eq!(
        names(devices().unwrap()),
        ["env0=10.9.8.7"],
        "the variable wins over the file"
    );

    std::env::remove_var("UROCE_DEVICES");
    std::env::set_var("UROCE_CONFIG", path.with_extension("missing"));
    let e = devices().unwrap_err();
    assert!(e.to_string().contains("UROCE_CONFIG"), "{e}");
    std::env::remove_var("UROCE_CONFIG");
    std::fs::remove_file(&path).unwrap();
}

//! The `tandem` binary's configuration checks, run as a real process.

use std::io::Write;

use tandem_tests::tandem;

fn write(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn version_prints_the_package_version() {
    let out = tandem().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("tandem {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn shipped_config_is_valid_and_shard_size_is_printed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/tandem.toml");
    let out = tandem()
        .arg("check-config")
        .arg(&root)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 4 layers × 2 × (2 heads / TP 2) × 64 × 2 bytes × 512 tokens.
    assert_eq!(v["derived"]["shard_bytes"], 4 * 2 * 64 * 2 * 512);
    assert_eq!(v["derived"]["world_size"], 2);
}

#[test]
fn environment_overrides_the_file_and_secrets_are_masked() {
    let f = write("[group]\nsecret = \"file-secret-0123456789\"\n");
    let out = tandem()
        .arg("check-config")
        .arg(f.path())
        .arg("--json")
        .env("TANDEM__GROUP__PP_SIZE", "2")
        .env("TANDEM__REDIS__URL", "redis://admin:hunter2@127.0.0.1:6379")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("file-secret") && !stdout.contains("hunter2"),
        "{stdout}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["effective"]["group"]["pp_size"], 2);
    assert_eq!(v["derived"]["world_size"], 4);
}

#[test]
fn unknown_key_exits_78_naming_key_and_file() {
    let f = write("[store]\nhost_capacity_block = 10\n");
    let out = tandem().arg("check-config").arg(f.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("host_capacity_block") && err.contains(&f.path().display().to_string()),
        "{err}"
    );
}

#[test]
fn uneven_layout_is_refused_with_the_numbers() {
    let f = write("[group]\ntp_size = 4\n[model]\nnum_kv_heads = 6\n");
    let out = tandem().arg("check-config").arg(f.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("num_kv_heads = 6 does not divide evenly by tp_size = 4"),
        "{err}"
    );
}

#[test]
fn missing_file_is_a_clear_error() {
    let out = tandem()
        .arg("check-config")
        .arg("/nonexistent/tandem.toml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("cannot read configuration file /nonexistent/tandem.toml"));
}

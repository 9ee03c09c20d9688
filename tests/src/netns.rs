//! A network namespace joined to the test's own by a veth pair, to partition one rank from the
//! others and heal it again. Needs root (`ip netns`); where that is not permitted,
//! [`Netns::create`] returns `None` and the test skips with a message.
//!
//! It removes the namespace and the link when dropped, and touches no other interface.

/// A network namespace joined to this one by a veth pair (`/30` subnet).
pub struct Netns {
    name: String,
    host_if: String,
    /// The host side's address.
    pub host_ip: String,
    /// The namespace side's address.
    pub ns_ip: String,
}

fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Netns {
    /// Create it, or `None` where that is not permitted.
    pub fn create() -> Option<Self> {
        let id = std::process::id() % 100_000;
        let subnet = 16 + id % 200;
        let n = Netns {
            name: format!("tdm{id}"),
            host_if: format!("tdmh{id}"),
            host_ip: format!("10.213.{subnet}.1"),
            ns_ip: format!("10.213.{subnet}.2"),
        };
        let peer = format!("tdmn{id}");
        let ok = ip(&["netns", "add", &n.name])
            && ip(&[
                "link", "add", &n.host_if, "type", "veth", "peer", "name", &peer,
            ])
            && ip(&["link", "set", &peer, "netns", &n.name])
            && ip(&[
                "addr",
                "add",
                &format!("{}/30", n.host_ip),
                "dev",
                &n.host_if,
            ])
            && ip(&["link", "set", &n.host_if, "up"])
            && ip(&[
                "netns",
                "exec",
                &n.name,
                "ip",
                "addr",
                "add",
                &format!("{}/30", n.ns_ip),
                "dev",
                &peer,
            ])
            && ip(&["netns", "exec", &n.name, "ip", "link", "set", &peer, "up"])
            && ip(&["netns", "exec", &n.name, "ip", "link", "set", "lo", "up"]);
        if !ok {
            drop(n);
            return None;
        }
        Some(n)
    }

    /// The namespace's name (for `ip netns exec NAME ...`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Partition: the host side of the link goes down; packets to and from the namespace are
    /// dropped silently.
    pub fn cut(&self) {
        assert!(
            ip(&["link", "set", &self.host_if, "down"]),
            "ip link set {} down",
            self.host_if
        );
    }

    /// Heal the partition.
    pub fn heal(&self) {
        assert!(
            ip(&["link", "set", &self.host_if, "up"]),
            "ip link set {} up",
            self.host_if
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        ip(&["link", "del", &self.host_if]);
        ip(&["netns", "del", &self.name]);
    }
}

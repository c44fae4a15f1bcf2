//! A route's policies in the model: client address rules (`ip`, per route
//! and global) with their address blocks, header changes and `cors`.

use std::time::Duration;

/// Client address rules: denied when in `deny`, or when `allow` is not
/// empty and the address is not in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpRules {
    pub allow: Vec<Cidr>,
    pub deny: Vec<Cidr>,
}

/// An address block such as `10.0.0.0/8` or `2001:db8::/32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/LEN` or a bare address (a block of one).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (a, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: std::net::IpAddr = a.trim().parse().map_err(|_| {
            format!("expected an address block like 10.0.0.0/8 or 2001:db8::/32, found {text:?}")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("prefix length must be 0 to {max}, found {l:?}"))?,
        };
        let c = Cidr { addr, prefix };
        if c.network() != addr {
            return Err(format!(
                "{text:?} has bits set after the prefix; the block is {}/{prefix}",
                c.network()
            ));
        }
        Ok(c)
    }

    fn network(&self) -> std::net::IpAddr {
        use std::net::IpAddr;
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }

    /// Whether `ip` is in the block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(a) & mask == u32::from(n)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(n)
            }
            _ => false,
        }
    }
}

impl IpRules {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether `ip` may pass.
    pub fn admits(&self, ip: std::net::IpAddr) -> bool {
        !self.deny.iter().any(|c| c.contains(ip))
            && (self.allow.is_empty() || self.allow.iter().any(|c| c.contains(ip)))
    }
}

/// Header changes on the way upstream or back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderOps {
    /// Replace every received value with this one (names as written).
    pub set: Vec<(String, String)>,
    /// Add this line, keeping received ones.
    pub add: Vec<(String, String)>,
    /// Drop every received value (names lower-cased).
    pub remove: Vec<String>,
}

/// Cross-origin resource sharing for a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// Allowed origins.
    pub origins: Vec<OriginMatch>,
    /// Allowed methods (upper-case).
    pub methods: Vec<String>,
    /// Allowed request headers (lower-case).
    pub headers: Vec<String>,
    /// Response headers the browser may read (as written).
    pub expose_headers: Vec<String>,
    pub credentials: bool,
    /// How long a browser may cache a preflight answer.
    pub max_age: Option<Duration>,
}

/// An allowed origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginMatch {
    /// `*`: every origin.
    Any,
    /// `https://shop.example.com` (lower-case, no trailing slash).
    Exact(String),
    /// `https://*.example.com`: scheme `https://`, host ending `.example.com`
    /// with at least one more label (stored as scheme and suffix).
    Suffix { scheme: String, suffix: String },
}

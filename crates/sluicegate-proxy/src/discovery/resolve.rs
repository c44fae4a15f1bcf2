//! One DNS query of the discovery plane and its answer: a host name's A
//! and AAAA addresses, or an SRV name's targets (at the most preferred
//! priority), ports and weights, with the shortest TTL seen.

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, NameServerConfigGroup, ResolverConfig,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::TokioResolver;
use sluicegate_config::{Discovery, DnsSettings};

/// Largest endpoint weight (SRV weights above it are lowered to it).
const MAX_WEIGHT: u32 = 1000;

/// A name to resolve.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Query {
    /// A host's addresses, each an endpoint on `port` with `weight`.
    Host {
        host: String,
        port: u16,
        weight: u32,
    },
    /// An SRV name.
    Srv(String),
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Query::Host { host, port, .. } => write!(f, "{host}:{port}"),
            Query::Srv(name) => write!(f, "SRV {name}"),
        }
    }
}

/// The queries of a service's names.
pub(super) fn queries(d: &Discovery) -> impl Iterator<Item = Query> + '_ {
    d.names
        .iter()
        .map(|n| Query::Host {
            host: n.host.clone(),
            port: n.port,
            weight: n.weight,
        })
        .chain(d.dns_srv.iter().map(|s| Query::Srv(s.clone())))
}

/// A good answer: endpoint addresses with weights, and how long it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    pub addrs: Vec<(SocketAddr, u32)>,
    pub ttl: Duration,
}

/// The resolver, set up from `dns` (cheap to clone: shared inside).
#[derive(Clone)]
pub(super) struct Resolver(TokioResolver);

impl Resolver {
    pub(super) fn new(dns: &DnsSettings) -> Result<Resolver, String> {
        let provider = TokioConnectionProvider::default();
        let mut builder = if dns.servers.is_empty() {
            TokioResolver::builder(provider).map_err(|e| format!("/etc/resolv.conf: {e}"))?
        } else {
            let mut group = Vec::with_capacity(dns.servers.len() * 2);
            for &s in &dns.servers {
                group.push(NameServerConfig::new(s, Protocol::Udp));
                group.push(NameServerConfig::new(s, Protocol::Tcp));
            }
            let config =
                ResolverConfig::from_parts(None, vec![], NameServerConfigGroup::from(group));
            TokioResolver::builder_with_config(config, provider)
        };
        let opts = builder.options_mut();
        // Answers are kept here, by their TTL; the resolver asks every time.
        opts.cache_size = 0;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.timeout = Duration::from_secs(2);
        opts.attempts = 2;
        Ok(Resolver(builder.build()))
    }

    pub(super) async fn resolve(&self, q: &Query) -> Result<Found, String> {
        match q {
            Query::Host { host, port, weight } => {
                let (ips, ttl) = self.ips(host).await?;
                Ok(Found {
                    addrs: ips
                        .into_iter()
                        .map(|ip| (SocketAddr::new(ip, *port), *weight))
                        .collect(),
                    ttl,
                })
            }
            Query::Srv(name) => self.srv(name).await,
        }
    }

    async fn ips(&self, host: &str) -> Result<(Vec<std::net::IpAddr>, Duration), String> {
        let found = self.0.lookup_ip(host).await.map_err(|e| e.to_string())?;
        let ttl = ttl_left(found.valid_until());
        let ips: Vec<_> = found.iter().collect();
        if ips.is_empty() {
            return Err("no addresses".into());
        }
        Ok((ips, ttl))
    }

    async fn srv(&self, name: &str) -> Result<Found, String> {
        let found = self.0.srv_lookup(name).await.map_err(|e| e.to_string())?;
        let mut ttl = ttl_left(found.as_lookup().valid_until());
        let Some(best) = found.iter().map(|r| r.priority()).min() else {
            return Err("no SRV records".into());
        };
        let mut addrs = Vec::new();
        for r in found.iter().filter(|r| r.priority() == best) {
            let target = r.target().to_utf8();
            let (ips, t) = self
                .ips(&target)
                .await
                .map_err(|e| format!("SRV target {target}: {e}"))?;
            ttl = ttl.min(t);
            let weight = u32::from(r.weight()).clamp(1, MAX_WEIGHT);
            addrs.extend(
                ips.into_iter()
                    .map(|ip| (SocketAddr::new(ip, r.port()), weight)),
            );
        }
        Ok(Found { addrs, ttl })
    }
}

fn ttl_left(until: Instant) -> Duration {
    until.saturating_duration_since(Instant::now())
}

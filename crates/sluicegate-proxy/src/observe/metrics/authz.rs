//! Identity's counters: a route's external checks (`forward_auth`,
//! `ext_authz`: decisions, failed checks by cause, what `on_error` did,
//! cached decisions) kept with its other counters, and each OpenID
//! Connect issuer's (JWKS fetches, refetches asked by unknown `kid`s,
//! introspection answers and cache hits) read from the issuer's state.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{family, label};

/// Why a check failed: the `error` label of
/// `sluicegate_authz_errors_total`, in the order of
/// [`CheckMetrics::errors`].
pub const AUTHZ_ERRORS: [&str; 3] = ["timeout", "unreachable", "bad_answer"];

/// One kind of check's counters on one route.
#[derive(Debug, Default)]
pub struct CheckMetrics {
    /// Decisions (the service's, or the cache's), allowing and denying.
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    /// Checks that failed, by cause (the order of [`AUTHZ_ERRORS`]).
    pub errors: [AtomicU64; AUTHZ_ERRORS.len()],
    /// Failed checks whose `on_error` let the request through, and those
    /// it answered 503.
    pub on_error_allowed: AtomicU64,
    pub on_error_denied: AtomicU64,
    /// Decisions taken from the decision cache (`forward_auth` only).
    pub cache_hits: AtomicU64,
}

impl CheckMetrics {
    fn used(&self) -> bool {
        self.allowed.load(Ordering::Relaxed)
            + self.denied.load(Ordering::Relaxed)
            + self.on_error_allowed.load(Ordering::Relaxed)
            + self.on_error_denied.load(Ordering::Relaxed)
            > 0
    }
}

/// A route's external checks' counters.
#[derive(Debug, Default)]
pub struct AuthzMetrics {
    pub forward: CheckMetrics,
    pub ext: CheckMetrics,
}

impl AuthzMetrics {
    /// Each check kind's label and counters, used ones only.
    fn checks(&self) -> impl Iterator<Item = (&'static str, &CheckMetrics)> + Clone {
        [("forward_auth", &self.forward), ("ext_authz", &self.ext)]
            .into_iter()
            .filter(|(_, c)| c.used())
    }
}

/// Writes the external checks' families, for the routes whose checks ran.
pub fn render_authz<'a>(
    out: &mut String,
    routes: impl Iterator<Item = (&'a str, &'a AuthzMetrics)> + Clone,
) {
    let rows = routes
        .flat_map(|(route, m)| {
            let route = label(route);
            m.checks()
                .map(move |(check, c)| (format!("route=\"{route}\",check=\"{check}\""), c))
        })
        .collect::<Vec<_>>();
    if rows.is_empty() {
        return;
    }
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    family(
        out,
        "sluicegate_authz_decisions_total",
        "counter",
        "Decisions of a route's forward_auth or ext_authz service (cached ones among them), by route, check and decision.",
        rows.iter().flat_map(|(l, c)| {
            [("allow", n(&c.allowed)), ("deny", n(&c.denied))]
                .map(|(d, v)| (format!("{l},decision=\"{d}\""), v))
        }),
    );
    family(
        out,
        "sluicegate_authz_errors_total",
        "counter",
        "Checks of a route's forward_auth or ext_authz service that failed (no answer in time, service unreachable, an answer that could not be read), by route, check and error.",
        rows.iter().flat_map(|(l, c)| {
            AUTHZ_ERRORS
                .iter()
                .zip(&c.errors)
                .map(move |(e, v)| (format!("{l},error=\"{e}\""), n(v)))
        }),
    );
    family(
        out,
        "sluicegate_authz_on_error_total",
        "counter",
        "Failed checks by what the check's on_error did (allow: let through; deny: answered 503), by route and check.",
        rows.iter().flat_map(|(l, c)| {
            [
                ("allow", n(&c.on_error_allowed)),
                ("deny", n(&c.on_error_denied)),
            ]
            .map(|(a, v)| (format!("{l},action=\"{a}\""), v))
        }),
    );
    family(
        out,
        "sluicegate_authz_cache_hits_total",
        "counter",
        "Decisions of a route's forward_auth taken from its decision cache, by route.",
        rows.iter()
            .filter(|(l, _)| l.ends_with("check=\"forward_auth\""))
            .map(|(l, c)| (l.clone(), n(&c.cache_hits))),
    );
}

/// What one OpenID Connect issuer counted, read by the caller.
#[derive(Debug, Clone, Default)]
pub struct IssuerUse {
    pub name: String,
    /// Key set fetches that succeeded, and that failed (the last good set
    /// kept).
    pub fetches_ok: u64,
    pub fetches_failed: u64,
    /// Refetches asked by tokens with an unknown `kid` (let through the
    /// rate limit).
    pub refetches: u64,
    /// With `introspection`: answers active, inactive, calls that failed,
    /// and answers taken from the cache.
    pub introspection: Option<[u64; 4]>,
}

/// Writes the issuers' families.
pub fn render_issuers(out: &mut String, issuers: &[IssuerUse]) {
    if issuers.is_empty() {
        return;
    }
    let iss = |i: &IssuerUse| format!("issuer=\"{}\"", label(&i.name));
    family(
        out,
        "sluicegate_jwks_fetches_total",
        "counter",
        "Key set (JWKS) fetches of an OpenID Connect issuer, by issuer and result (failed: the last good set kept).",
        issuers.iter().flat_map(|i| {
            [("ok", i.fetches_ok), ("failed", i.fetches_failed)]
                .map(|(r, v)| (format!("{},result=\"{r}\"", iss(i)), v))
        }),
    );
    family(
        out,
        "sluicegate_jwks_refetches_total",
        "counter",
        "Key set refetches asked by tokens naming an unknown kid (at most one per 10 s), by issuer.",
        issuers.iter().map(|i| (iss(i), i.refetches)),
    );
    let intro = issuers
        .iter()
        .filter_map(|i| Some((iss(i), i.introspection?)))
        .collect::<Vec<_>>();
    if intro.is_empty() {
        return;
    }
    family(
        out,
        "sluicegate_introspections_total",
        "counter",
        "Token introspection calls (RFC 7662) by issuer and result (active, inactive, error: no answer, or one that could not be read).",
        intro.iter().flat_map(|(l, v)| {
            [("active", v[0]), ("inactive", v[1]), ("error", v[2])]
                .map(|(r, n)| (format!("{l},result=\"{r}\""), n))
        }),
    );
    family(
        out,
        "sluicegate_introspection_cache_hits_total",
        "counter",
        "Opaque tokens whose introspection answer came from the cache, by issuer.",
        intro.iter().map(|(l, v)| (l.clone(), v[3])),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_checks_that_ran_are_written() {
        let m = AuthzMetrics::default();
        m.forward.allowed.fetch_add(2, Ordering::Relaxed);
        m.forward.cache_hits.fetch_add(1, Ordering::Relaxed);
        m.forward.errors[0].fetch_add(1, Ordering::Relaxed);
        m.forward.on_error_denied.fetch_add(1, Ordering::Relaxed);
        let idle = AuthzMetrics::default();
        let mut out = String::new();
        render_authz(&mut out, [("r", &m), ("idle", &idle)].into_iter());
        let l = "route=\"r\",check=\"forward_auth\"";
        for want in [
            format!("sluicegate_authz_decisions_total{{{l},decision=\"allow\"}} 2\n"),
            format!("sluicegate_authz_decisions_total{{{l},decision=\"deny\"}} 0\n"),
            format!("sluicegate_authz_errors_total{{{l},error=\"timeout\"}} 1\n"),
            format!("sluicegate_authz_on_error_total{{{l},action=\"deny\"}} 1\n"),
            format!("sluicegate_authz_cache_hits_total{{{l}}} 1\n"),
        ] {
            assert!(out.contains(&want), "{want} not in {out}");
        }
        assert!(
            !out.contains("idle") && !out.contains("ext_authz\""),
            "{out}"
        );
        let mut none = String::new();
        render_authz(&mut none, [("idle", &idle)].into_iter());
        assert!(none.is_empty());
    }

    #[test]
    fn issuers_and_their_introspection() {
        let mut out = String::new();
        let i = IssuerUse {
            name: "corp".into(),
            fetches_ok: 3,
            fetches_failed: 1,
            refetches: 2,
            introspection: Some([5, 4, 1, 9]),
        };
        render_issuers(&mut out, &[i]);
        for want in [
            "sluicegate_jwks_fetches_total{issuer=\"corp\",result=\"ok\"} 3\n",
            "sluicegate_jwks_fetches_total{issuer=\"corp\",result=\"failed\"} 1\n",
            "sluicegate_jwks_refetches_total{issuer=\"corp\"} 2\n",
            "sluicegate_introspections_total{issuer=\"corp\",result=\"inactive\"} 4\n",
            "sluicegate_introspection_cache_hits_total{issuer=\"corp\"} 9\n",
        ] {
            assert!(out.contains(want), "{want} not in {out}");
        }
    }
}

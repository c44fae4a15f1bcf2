//! Revocation of a worker's long-lived streams: tunnels, and HTTP/2 (gRPC)
//! streams or requests still under way a moment after they were admitted
//! on a route with `auth`. Each registers its [`Grant`] (the app, what it
//! authenticated with, the route, what the app's ACL saw) in the worker's
//! [`Revocations`]; at each worker tick, when a new snapshot was published
//! (a reload, an admin API or etcd change), every grant is checked against
//! it: the route's auth filter is asked whether the credential still names
//! the app ([`crate::filters::Filter::readmit`]), then the app's ACL. A
//! grant whose token expired, or that no longer passes, is revoked: logged,
//! counted, and its stream woken to close itself. Per worker, no lock;
//! routes without auth never register anything.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use slab::Slab;
use tokio::sync::Notify;

use crate::filters::grant::{Credential, Readmit, Revoked};
use crate::snapshot::{ActionRt, Shared, Snapshot};
use crate::transport::tls::identity::ClientIdentity;

/// What a long-lived stream was admitted with, and its revocation.
pub(crate) struct Grant {
    /// The app's id.
    pub app: Box<str>,
    pub cred: Credential,
    /// The connection's client certificate (for `auth: mtls`).
    pub identity: Option<Box<ClientIdentity>>,
    pub route: Arc<str>,
    /// The method and path the app's `methods` and `paths` were checked on.
    pub method: Box<[u8]>,
    pub path: Box<[u8]>,
    /// The snapshot generation it was last checked against.
    checked: Cell<u64>,
    revoked: Cell<Option<Revoked>>,
    wake: Notify,
}

impl Grant {
    pub(crate) fn new(
        app: &str,
        cred: Credential,
        identity: Option<&ClientIdentity>,
        route: Arc<str>,
        method: &[u8],
        path: &[u8],
        generation: u64,
    ) -> Grant {
        Grant {
            app: app.into(),
            cred,
            identity: identity.map(|i| Box::new(i.clone())),
            route,
            method: method.into(),
            path: path.into(),
            checked: Cell::new(generation),
            revoked: Cell::new(None),
            wake: Notify::new(),
        }
    }

    /// Why it was revoked, once it was.
    pub(crate) fn revoked(&self) -> Option<Revoked> {
        self.revoked.get()
    }

    /// Ends when the grant is revoked.
    pub(crate) async fn wait(&self) {
        while self.revoked.get().is_none() {
            self.wake.notified().await;
        }
    }

    /// The Unix second after which its token no longer admits it (0: never).
    fn until(&self) -> u64 {
        match self.cred {
            Credential::Jwt { until, .. } | Credential::Issuer { until, .. } => until,
            _ => 0,
        }
    }

    /// Whether `snap` still admits it; why not.
    fn check(&self, snap: &Snapshot, route: Option<usize>) -> Result<(), Revoked> {
        let Some(route) = route.map(|i| &snap.routes[i]) else {
            return Err(Revoked::AuthChanged);
        };
        let r = Readmit {
            app: &self.app,
            cred: self.cred,
            identity: self.identity.as_deref(),
            apps: &snap.apps,
        };
        route
            .filters
            .iter()
            .find_map(|f| f.readmit(&r))
            .unwrap_or(Err(Revoked::AuthChanged))?;
        let app = snap.apps.by_id(&self.app).ok_or(Revoked::AppRemoved)?;
        let service = match &route.action {
            ActionRt::Proxy { service, .. } => Some(*service),
            ActionRt::Respond { .. } | ActionRt::Aggregate(_) => None,
        };
        if !service.is_none_or(|s| app.may_call(s)) || !app.may_request(&self.method, &self.path) {
            return Err(Revoked::Denied);
        }
        Ok(())
    }
}

/// A worker's registered grants.
#[derive(Default)]
pub(crate) struct Revocations {
    list: RefCell<Slab<Rc<Grant>>>,
    /// The generation of the last snapshot swept.
    swept: Cell<u64>,
}

/// A registration, removed when dropped (the stream ended).
pub(crate) struct Registered<'w> {
    list: &'w Revocations,
    key: usize,
    pub grant: Rc<Grant>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.list.list.borrow_mut().try_remove(self.key);
    }
}

impl Revocations {
    /// Registers `grant`, checked at once against the snapshot in force if
    /// that is newer than the one it was admitted under (a change that came
    /// between the admission and now).
    pub(crate) fn register(&self, shared: &Shared, grant: Grant) -> Registered<'_> {
        let grant = Rc::new(grant);
        let snap = shared.snapshot.load();
        if snap.generation != grant.checked.get() {
            sweep_one(shared, &snap, &grant, None, unix_now());
        } else if let Some(why) = expired(&grant, unix_now()) {
            revoke(shared, &grant, why);
        }
        let key = self.list.borrow_mut().insert(grant.clone());
        Registered {
            list: self,
            key,
            grant,
        }
    }

    /// Checks every grant against the snapshot in force when it is new,
    /// and every token's expiry; revokes those that no longer pass. Run at
    /// each worker tick (so within a tick of a change).
    pub(crate) fn sweep(&self, shared: &Shared) {
        if self.list.borrow().is_empty() {
            return;
        }
        let now = unix_now();
        let snap = shared.snapshot.load();
        let fresh = snap.generation != self.swept.get();
        self.swept.set(snap.generation);
        // Routes by name, once per sweep of a new snapshot.
        let names: Option<HashMap<&str, usize>> = fresh.then(|| {
            snap.routes
                .iter()
                .enumerate()
                .map(|(i, r)| (&*r.name, i))
                .collect()
        });
        let grants: Vec<Rc<Grant>> = self.list.borrow().iter().map(|(_, g)| g.clone()).collect();
        for g in grants {
            if g.revoked.get().is_some() {
                continue;
            }
            if let Some(why) = expired(&g, now) {
                revoke(shared, &g, why);
            } else if fresh && g.checked.get() != snap.generation {
                sweep_one(shared, &snap, &g, names.as_ref(), now);
            }
        }
    }
}

/// `now` in Unix milliseconds.
fn expired(g: &Grant, now: u64) -> Option<Revoked> {
    let until = g.until();
    (until != 0 && now > until.saturating_mul(1000)).then_some(Revoked::Expired)
}

fn sweep_one(
    shared: &Shared,
    snap: &Snapshot,
    g: &Grant,
    names: Option<&HashMap<&str, usize>>,
    now: u64,
) {
    g.checked.set(snap.generation);
    let route = match names {
        Some(n) => n.get(&*g.route).copied(),
        None => snap.routes.iter().position(|r| r.name == g.route),
    };
    let verdict = g.check(snap, route).and_then(|()| match expired(g, now) {
        Some(why) => Err(why),
        None => Ok(()),
    });
    if let Err(why) = verdict {
        revoke(shared, g, why);
    }
}

/// Marks `g` revoked, logs and counts it, and wakes its stream.
fn revoke(shared: &Shared, g: &Grant, why: Revoked) {
    g.revoked.set(Some(why));
    tracing::info!(
        app = %g.app,
        route = %g.route,
        reason = why.as_str(),
        "stream closed: its authentication was revoked"
    );
    shared.global.count_revoked(&g.route, why.as_str());
    g.wake.notify_one();
}

/// Unix milliseconds.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

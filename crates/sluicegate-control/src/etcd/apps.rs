//! Changes to apps alone, among many: applied in place of a whole reload
//! when the watch brings only `apps/` keys (the changed apps decoded
//! alone and swapped into the running apps table), and an admin API write
//! of one app checked alone and written to etcd as one key.

use std::time::Instant;

use sluicegate_proxy::{AppChange, DeltaError};

use super::apply::Etcd;
use super::objects::Objects;
use crate::history::{Issue, Source};
use crate::publish::{IfMatch, Publisher, WriteError};

impl Etcd {
    /// Applies changes that are all to apps in place of a whole reload:
    /// the changed apps are decoded alone (with the running services and
    /// plans, by the file's rules) and the running snapshot gets a new
    /// apps table sharing every shard they do not touch. `None`: not such
    /// a change (another kind of object, the file's apps in force before
    /// or after, an app with `mtls`), or it does not validate; the whole
    /// config is then built and checked as usual, which also reports why.
    /// Returns the new generation and the milliseconds spent decoding.
    pub(super) fn apply_app_delta(
        &self,
        p: &Publisher,
        objects: &Objects,
        undo: &[(String, Option<serde_json::Value>)],
    ) -> Option<(u64, f64)> {
        const APPS: &str = "apps/";
        let started = Instant::now();
        if undo.is_empty() || !undo.iter().all(|(k, _)| k.starts_with(APPS)) {
            return None;
        }
        let mtls = |v: &serde_json::Value| v.get("mtls").is_some();
        if undo
            .iter()
            .any(|(_, before)| before.as_ref().is_some_and(mtls))
        {
            return None;
        }
        // The etcd apps replace the file's only while there is one: an
        // emptied or first apps list changes which apps are in force.
        let changed: std::collections::HashSet<&str> =
            undo.iter().map(|(k, _)| k.as_str()).collect();
        let others = objects
            .range(APPS.to_string()..)
            .take_while(|(k, _)| k.starts_with(APPS))
            .any(|(k, _)| !changed.contains(k.as_str()));
        let before = others || undo.iter().any(|(_, b)| b.is_some());
        let after = others || undo.iter().any(|(k, _)| objects.contains_key(k));
        if !before || !after {
            return None;
        }
        let mut items = Vec::new();
        let mut removed = Vec::new();
        for (key, _) in undo {
            let name = &key[APPS.len()..];
            match objects.get(key) {
                None => removed.push(name),
                Some(serde_json::Value::Object(fields)) if !fields.contains_key("mtls") => {
                    let mut fields = fields.clone();
                    fields.insert("id".to_string(), serde_json::Value::from(name));
                    items.push(serde_json::Value::Object(fields));
                }
                Some(_) => return None,
            }
        }
        let snap = p.shared.snapshot.load_full();
        let services: Vec<&str> = snap.services.iter().map(|s| &*s.name).collect();
        let plans: Vec<&str> = snap.apps.plan_names().collect();
        let apps =
            sluicegate_config::decode_apps(&serde_json::Value::Array(items), &services, &plans)
                .ok()?;
        let changes: Vec<AppChange<'_>> = apps
            .iter()
            .map(AppChange::Upsert)
            .chain(removed.into_iter().map(AppChange::Remove))
            .collect();
        let decode_ms = started.elapsed().as_secs_f64() * 1e3;
        let generation = p.shared.apply_apps(&changes).ok()?;
        Some((generation, decode_ms))
    }

    /// Whether a change of app `name` to `new` (`None`: removed) can be
    /// written and applied alone: etcd's apps in force before and after
    /// it, and no `mtls` in the old or new object.
    pub(super) fn app_alone(&self, name: &str, new: Option<&serde_json::Value>) -> bool {
        const APPS: &str = "apps/";
        let key = format!("{APPS}{name}");
        let mtls = |v: &serde_json::Value| v.get("mtls").is_some();
        if self.good.get(&key).is_some_and(mtls) || new.is_some_and(mtls) {
            return false;
        }
        // Another app than this one: at most two keys looked at.
        let other = self
            .good
            .range(APPS.to_string()..)
            .take_while(|(k, _)| k.starts_with(APPS))
            .any(|(k, _)| *k != key);
        let before = self.good.contains_key(&key) || other;
        let after = new.is_some() || other;
        before && after
    }

    /// An admin API write of one app (see [`Self::app_alone`]):
    /// checked alone by the file's rules against the running services,
    /// plans and other apps' keys, then written as one key in a
    /// transaction comparing the revision, and applied in place when the
    /// watch brings it back. Problems are at the body's JSON paths.
    pub(super) fn write_one_app(
        &mut self,
        p: &mut Publisher,
        name: &str,
        new: Option<serde_json::Value>,
        if_match: Option<&IfMatch>,
    ) -> Result<u64, WriteError> {
        let revision = p.matching(if_match)?;
        let key = format!("apps/{name}");
        let Some(mut object) = new else {
            return self.commit(p, Vec::new(), vec![key], None);
        };
        if let Err(issues) = check_app(p, name, &object) {
            p.history.push(Source::Api, false, revision, issues.clone());
            return Err(WriteError::Invalid(issues));
        }
        if let Some(fields) = object.as_object_mut() {
            fields.remove("id");
        }
        self.commit(p, vec![(key, object)], Vec::new(), None)
    }
}

/// Problems of app object `object` named `name`, as a change alone.
fn check_app(p: &Publisher, name: &str, object: &serde_json::Value) -> Result<(), Vec<Issue>> {
    let mut item = object.clone();
    if let Some(fields) = item.as_object_mut() {
        fields.insert("id".to_string(), serde_json::Value::from(name));
    }
    let snap = p.shared.snapshot.load_full();
    let services: Vec<&str> = snap.services.iter().map(|s| &*s.name).collect();
    let plans: Vec<&str> = snap.apps.plan_names().collect();
    let list = serde_json::Value::Array(vec![item]);
    let apps = sluicegate_config::decode_apps(&list, &services, &plans).map_err(|problems| {
        problems
            .into_iter()
            .map(|problem| Issue {
                path: body_path(&problem.path),
                message: problem
                    .message
                    .strip_prefix("apps[0].")
                    .unwrap_or(&problem.message)
                    .to_string(),
            })
            .collect::<Vec<_>>()
    })?;
    match p.shared.check_apps(&[AppChange::Upsert(&apps[0])]) {
        Ok(()) | Err(DeltaError::NeedsFull) => Ok(()),
        Err(DeltaError::Invalid(list)) => Err(list
            .into_iter()
            .map(|(_, field, message)| Issue {
                path: if field.is_empty() {
                    "$".to_string()
                } else {
                    format!("$.{field}")
                },
                message,
            })
            .collect()),
    }
}

/// `$.apps[0].keys[1]` as a path in the app's own object: `$.keys[1]`.
fn body_path(path: &str) -> String {
    match path.strip_prefix("$.apps[0]") {
        Some(rest) => format!("${rest}"),
        None => path.to_string(),
    }
}

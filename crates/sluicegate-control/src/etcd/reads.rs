//! Reads of one kind of resource, or one object, straight from the etcd
//! objects in force, without making a document of the whole config.

use crate::reload::Reloader;

impl Reloader {
    /// The objects of kind `section` (`routes`, `apps`, ...) when etcd's
    /// are those in force (etcd holds at least one: they replace the
    /// file's): how many have a name containing `filter`, and `limit` of
    /// them from `offset`, each with its name, in name order. Read from
    /// the objects, not from a document of the whole config. `None`: not
    /// etcd mode, or the file's are in force.
    pub(crate) fn etcd_page(
        &self,
        section: &str,
        filter: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Option<(usize, Vec<(String, serde_json::Value)>)> {
        let (mode, start) = self.etcd_kind(section)?;
        let named = mode
            .good
            .range(start.clone()..)
            .take_while(|(k, _)| k.starts_with(&start))
            .map(|(k, v)| (&k[start.len()..], v))
            .filter(|(name, _)| filter.is_none_or(|f| name.contains(f)));
        let mut total = 0;
        let mut page = Vec::new();
        for (name, value) in named {
            if total >= offset && page.len() < limit {
                page.push((name.to_string(), value.clone()));
            }
            total += 1;
        }
        Some((total, page))
    }

    /// The object `name` of kind `section` when etcd's are in force (see
    /// [`Self::etcd_page`]): `Some(None)` when there is no such object.
    pub(crate) fn etcd_item(&self, section: &str, name: &str) -> Option<Option<serde_json::Value>> {
        let (mode, start) = self.etcd_kind(section)?;
        Some(mode.good.get(&format!("{start}{name}")).cloned())
    }

    /// Etcd mode and its objects of kind `section` in force (at least one
    /// is kept), with the kind's key prefix.
    fn etcd_kind(&self, section: &str) -> Option<(&super::Mode, String)> {
        let mode = self.etcd.as_deref()?;
        let start = format!("{section}/");
        let any = mode
            .good
            .range(start.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&start));
        any.then_some((mode, start))
    }
}

//! Reads of one kind of resource, or one object, straight from the etcd
//! objects in force, without making a document of the whole config.

use super::apply::Etcd;
use crate::source::{Page, PageOf};

impl Etcd {
    /// The objects `want` asks for (of a kind such as `routes` or `apps`)
    /// when etcd's are those in force (etcd holds at least one: they
    /// replace the file's): how many match, and those on the page, each
    /// with its name, in name order. Read from
    /// the objects, not from a document of the whole config. `None`: the
    /// file's are in force.
    pub(super) fn kind_page(&self, want: &PageOf<'_>) -> Option<Page> {
        let start = self.kind(want.section)?;
        let named = self
            .good
            .range(start.clone()..)
            .take_while(|(k, _)| k.starts_with(&start))
            .map(|(k, v)| (&k[start.len()..], v))
            .filter(|(name, _)| want.filter.is_none_or(|f| name.contains(f)));
        let mut total = 0;
        let mut page = Vec::new();
        for (name, value) in named {
            if total >= want.offset && page.len() < want.limit {
                page.push((name.to_string(), value.clone()));
            }
            total += 1;
        }
        Some((total, page))
    }

    /// The object `name` of kind `section` when etcd's are in force (see
    /// [`Self::kind_page`]): `Some(None)` when there is no such object.
    pub(super) fn kind_item(&self, section: &str, name: &str) -> Option<Option<serde_json::Value>> {
        let start = self.kind(section)?;
        Some(self.good.get(&format!("{start}{name}")).cloned())
    }

    /// The key prefix of kind `section`, when etcd's objects of that kind
    /// are in force (at least one is kept).
    fn kind(&self, section: &str) -> Option<String> {
        let start = format!("{section}/");
        let any = self
            .good
            .range(start.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&start));
        any.then_some(start)
    }
}

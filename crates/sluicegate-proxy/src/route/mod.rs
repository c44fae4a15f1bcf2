//! Which route a request takes: the request target split up, the path
//! normalised, and the router's match on host, method, path (exact,
//! template, prefix or regex), headers, query parameters and cookies.

pub(crate) mod path;
pub(crate) mod router;
pub(crate) mod target;
pub(crate) mod template;
pub(crate) mod values;

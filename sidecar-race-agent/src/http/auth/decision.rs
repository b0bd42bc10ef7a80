//! What the API server said of a token and a path: the decision the reviewer makes
//! and the cache keeps.

/// What the API server said of a token and a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// The token is not valid (401).
    Unauthenticated,
    /// Valid, but its user may not `get` the path (403).
    Forbidden,
}

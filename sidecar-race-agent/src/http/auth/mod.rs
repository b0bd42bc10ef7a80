//! `--auth=kubernetes`: `/metrics` and `/api/v1/incidents` answer only callers the
//! API server vouches for, as kube-rbac-proxy does: the bearer token is reviewed
//! (TokenReview), the user it names must be allowed `get` on the path's virtual
//! resource of the `sidecar-race.io` group in the agent's namespace
//! (SubjectAccessReview), decisions are reused briefly (allows and denials apart).
//! 401 and 403 carry no detail. When the API server cannot be reached, an allow
//! reviewed at most 5 minutes ago still holds; anything else is 503, never 200, and
//! counted. Reviews are bounded: per source (429 beyond its budget, the API server not
//! asked), in flight and waiting.

mod authenticator;
mod budget;
mod cache;
mod decision;
mod middleware;
mod review;

pub use self::{
    authenticator::{AuthCounts, Authenticator},
    budget::ReviewBudget,
    cache::CacheTtls,
    decision::Decision,
    middleware::require,
    review::{GROUP, KubeReviewer, NoClient, Reviewer, Unreachable, access_review, resource_of},
};

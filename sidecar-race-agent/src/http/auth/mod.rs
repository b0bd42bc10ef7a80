//! `--auth=kubernetes`: `/metrics` and `/api/v1/incidents` answer only callers the
//! API server vouches for, as kube-state-metrics' auth filter does: the bearer token
//! is reviewed (TokenReview), the user it names must be allowed `get` on the path
//! (SubjectAccessReview), decisions are reused briefly. 401 and 403 carry no detail.
//! When the API server cannot be reached, an allow reviewed at most 5 minutes ago
//! still holds; anything else is 503, never 200, and counted.

mod cache;
mod decision;
mod review;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Instant,
};

use axum::{
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use self::cache::{DecisionCache, TokenDigest};
pub use self::{
    cache::CacheTtls,
    decision::Decision,
    review::{KubeReviewer, NoClient, Reviewer, Unreachable},
};

/// Reviews sent to the API server at once; further requests wait (a client sending
/// new tokens in a loop cannot multiply its load on the API server).
const REVIEWS_AT_ONCE: usize = 4;

/// How each request to a protected path was answered, since the agent started.
#[derive(Debug, Default)]
pub struct AuthCounts {
    pub allowed: AtomicU64,
    /// Allowed by a cached allow while the API server could not be reached.
    pub allowed_unreachable: AtomicU64,
    pub unauthenticated: AtomicU64,
    pub forbidden: AtomicU64,
    /// 503: the API server could not be reached and no cached allow held.
    pub unavailable: AtomicU64,
}

impl AuthCounts {
    /// (result label, count), in a fixed order.
    pub fn read(&self) -> [(&'static str, u64); 5] {
        [
            ("allowed", self.allowed.load(Relaxed)),
            (
                "allowed_api_unreachable",
                self.allowed_unreachable.load(Relaxed),
            ),
            ("unauthenticated", self.unauthenticated.load(Relaxed)),
            ("forbidden", self.forbidden.load(Relaxed)),
            ("unavailable", self.unavailable.load(Relaxed)),
        ]
    }
}

pub struct Authenticator {
    reviewer: Box<dyn Reviewer>,
    cache: Mutex<DecisionCache>,
    reviews: Semaphore,
    pub counts: Arc<AuthCounts>,
}

/// How a request was let in or turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Decided(Decision),
    AllowedWhileUnreachable,
    Unavailable,
}

impl Authenticator {
    pub fn new(reviewer: Box<dyn Reviewer>, ttls: CacheTtls) -> Self {
        Self {
            reviewer,
            cache: Mutex::new(DecisionCache::new(ttls)),
            reviews: Semaphore::new(REVIEWS_AT_ONCE),
            counts: Arc::default(),
        }
    }

    async fn verdict(&self, token: &str, path: &str) -> Verdict {
        let digest: TokenDigest = Sha256::digest(token.as_bytes()).into();
        if let Some(d) = self.cache.lock().fresh(&digest, path, Instant::now()) {
            return Verdict::Decided(d);
        }
        let Ok(_review) = self.reviews.acquire().await else {
            return Verdict::Unavailable;
        };
        // Another request may have reviewed the same token meanwhile.
        if let Some(d) = self.cache.lock().fresh(&digest, path, Instant::now()) {
            return Verdict::Decided(d);
        }
        match self
            .reviewer
            .review(token.to_string(), path.to_string())
            .await
        {
            Ok(d) => {
                self.cache.lock().insert(digest, path, d, Instant::now());
                Verdict::Decided(d)
            }
            Err(e) => {
                tracing::warn!("cannot review a request to {path} with the API server: {e}");
                if self
                    .cache
                    .lock()
                    .allowed_while_unreachable(&digest, path, Instant::now())
                {
                    Verdict::AllowedWhileUnreachable
                } else {
                    Verdict::Unavailable
                }
            }
        }
    }

    fn count(&self, verdict: Verdict) {
        let c = &self.counts;
        let counter = match verdict {
            Verdict::Decided(Decision::Allowed) => &c.allowed,
            Verdict::AllowedWhileUnreachable => &c.allowed_unreachable,
            Verdict::Decided(Decision::Unauthenticated) => &c.unauthenticated,
            Verdict::Decided(Decision::Forbidden) => &c.forbidden,
            Verdict::Unavailable => &c.unavailable,
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// The header that carries the token through the API server's pod proxy, which removes
/// `Authorization` once it has authenticated the caller (`report --agents-via-api`). The
/// token is reviewed exactly like a bearer token.
pub const PROXIED_TOKEN: &str = "x-sidecar-race-token";

/// The middleware of the protected routes: the request goes on only when allowed.
pub async fn require(State(auth): State<Arc<Authenticator>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let proxied = headers.get(PROXIED_TOKEN).and_then(|v| v.to_str().ok());
    let token = bearer.or(proxied).map(str::trim).filter(|t| !t.is_empty());
    let verdict = match token {
        None => Verdict::Decided(Decision::Unauthenticated),
        Some(token) => auth.verdict(token, req.uri().path()).await,
    };
    auth.count(verdict);
    match verdict {
        Verdict::Decided(Decision::Allowed) | Verdict::AllowedWhileUnreachable => {
            next.run(req).await
        }
        Verdict::Decided(Decision::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized\n",
        )
            .into_response(),
        Verdict::Decided(Decision::Forbidden) => {
            (StatusCode::FORBIDDEN, "Forbidden\n").into_response()
        }
        Verdict::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "cannot authorize the request now\n",
        )
            .into_response(),
    }
}

//! The API server's answer on a bearer token and a path, the way kube-state-metrics'
//! auth filter asks it: a TokenReview of the token, then a SubjectAccessReview of
//! `get` on the non-resource URL for the user it names.

use std::time::Duration;

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};

use super::decision::Decision;

/// A review takes at most this long; past it the API server counts as unreachable.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Why no decision could be had (the API server down, slow, or refusing the agent).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(String);

/// Asks for decisions; the API server in the agent, a fake in tests.
pub trait Reviewer: Send + Sync + 'static {
    fn review(
        &self,
        token: String,
        path: String,
    ) -> futures::future::BoxFuture<'static, Result<Decision, Unreachable>>;
}

/// No client configuration (neither in-cluster nor KUBECONFIG): nothing can be
/// reviewed, so the protected paths answer 503 while detection goes on.
pub struct NoClient(pub String);

impl Reviewer for NoClient {
    fn review(
        &self,
        _token: String,
        _path: String,
    ) -> futures::future::BoxFuture<'static, Result<Decision, Unreachable>> {
        let why = self.0.clone();
        Box::pin(async move { Err(Unreachable(why)) })
    }
}

/// Reviews with the API server through the agent's own client.
pub struct KubeReviewer(pub Client);

impl Reviewer for KubeReviewer {
    fn review(
        &self,
        token: String,
        path: String,
    ) -> futures::future::BoxFuture<'static, Result<Decision, Unreachable>> {
        let client = self.0.clone();
        Box::pin(async move {
            tokio::time::timeout(REVIEW_TIMEOUT, review(client, token, path))
                .await
                .map_err(|_| Unreachable(format!("no answer within {REVIEW_TIMEOUT:?}")))?
        })
    }
}

async fn review(client: Client, token: String, path: String) -> Result<Decision, Unreachable> {
    let unreachable = |what: &str, e: kube::Error| Unreachable(format!("{what}: {e}"));
    let tr = Api::<TokenReview>::all(client.clone())
        .create(
            &PostParams::default(),
            &TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .map_err(|e| unreachable("TokenReview", e))?;
    let status = tr.status.unwrap_or_default();
    let user = match (status.authenticated, status.user) {
        (Some(true), Some(user)) => user,
        _ => return Ok(Decision::Unauthenticated),
    };
    let sar = Api::<SubjectAccessReview>::all(client)
        .create(
            &PostParams::default(),
            &SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: user.username,
                    uid: user.uid,
                    groups: user.groups,
                    extra: user.extra,
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(path),
                        verb: Some("get".into()),
                    }),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .map_err(|e| unreachable("SubjectAccessReview", e))?;
    Ok(match sar.status {
        Some(s) if s.allowed => Decision::Allowed,
        _ => Decision::Forbidden,
    })
}

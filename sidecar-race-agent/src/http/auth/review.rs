//! The API server's answer on a bearer token and a path, the way kube-rbac-proxy asks
//! it: a TokenReview of the token, then a SubjectAccessReview of `get` on a virtual
//! resource of the `sidecar-race.io` group (`incidents` for `/api/v1/incidents`,
//! `metrics` for `/metrics`) in the agent's namespace, for the user it names. A
//! resource attribute, not the non-resource URL: Kubernetes' default
//! `system:discovery` role grants `get` on `/api/*` to every authenticated user, so a
//! review of the URL `/api/v1/incidents` would let any pod's token in; no default
//! role names the group `sidecar-race.io`.

use std::time::Duration;

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec, UserInfo},
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};

use super::decision::Decision;

/// A review takes at most this long; past it the API server counts as unreachable.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// The API group of the agent's virtual resources (no object of it exists; RBAC
/// rules may name any group and resource).
pub const GROUP: &str = "sidecar-race.io";

/// The virtual resource a protected path is reviewed as; `None` for any other path
/// (denied: only these two are guarded).
pub fn resource_of(path: &str) -> Option<&'static str> {
    match path {
        "/api/v1/incidents" => Some("incidents"),
        "/metrics" => Some("metrics"),
        _ => None,
    }
}

/// Why no decision could be had (the API server down, slow, or refusing the agent).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub(crate) String);

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

/// Reviews with the API server through the agent's own client, for the virtual
/// resources in `namespace` (the agent's own).
pub struct KubeReviewer {
    client: Client,
    namespace: String,
}

impl KubeReviewer {
    /// Reviews in the client's default namespace: in a pod, its service account's
    /// namespace (the agent's); with a kubeconfig, the current context's.
    pub fn new(client: Client) -> Self {
        let namespace = client.default_namespace().to_string();
        Self { client, namespace }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl Reviewer for KubeReviewer {
    fn review(
        &self,
        token: String,
        path: String,
    ) -> futures::future::BoxFuture<'static, Result<Decision, Unreachable>> {
        let (client, namespace) = (self.client.clone(), self.namespace.clone());
        Box::pin(async move {
            tokio::time::timeout(REVIEW_TIMEOUT, review(client, token, path, namespace))
                .await
                .map_err(|_| Unreachable(format!("no answer within {REVIEW_TIMEOUT:?}")))?
        })
    }
}

/// The SubjectAccessReview asking whether `user` may `get` `resource` of
/// [`GROUP`] in `namespace`.
pub fn access_review(user: UserInfo, resource: &str, namespace: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(resource.into()),
                verb: Some("get".into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn review(
    client: Client,
    token: String,
    path: String,
    namespace: String,
) -> Result<Decision, Unreachable> {
    let unreachable = |what: &str, e: kube::Error| Unreachable(format!("{what}: {e}"));
    let Some(resource) = resource_of(&path) else {
        return Ok(Decision::Forbidden);
    };
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
            &access_review(user, resource, &namespace),
        )
        .await
        .map_err(|e| unreachable("SubjectAccessReview", e))?;
    Ok(match sar.status {
        Some(s) if s.allowed => Decision::Allowed,
        _ => Decision::Forbidden,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> UserInfo {
        UserInfo {
            username: Some("system:serviceaccount:sidecar-race:sidecar-race-scraper".into()),
            uid: Some("u-1".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            extra: None,
        }
    }

    #[test]
    fn the_review_asks_for_a_virtual_resource_in_the_agents_namespace_not_a_url() {
        let sar = access_review(user(), "incidents", "sidecar-race");
        let body = serde_json::to_value(&sar).unwrap();
        assert_eq!(
            body["spec"],
            serde_json::json!({
                "user": "system:serviceaccount:sidecar-race:sidecar-race-scraper",
                "uid": "u-1",
                "groups": ["system:serviceaccounts"],
                "resourceAttributes": {
                    "group": "sidecar-race.io",
                    "resource": "incidents",
                    "verb": "get",
                    "namespace": "sidecar-race",
                },
            }),
            "no nonResourceAttributes: system:discovery grants get on /api/* to everyone"
        );
    }

    #[test]
    fn each_protected_path_is_its_own_resource_and_nothing_else_is_one() {
        assert_eq!(resource_of("/api/v1/incidents"), Some("incidents"));
        assert_eq!(resource_of("/metrics"), Some("metrics"));
        for other in ["/api/v1/incidents/", "/api/v1", "/healthz", "/", ""] {
            assert_eq!(resource_of(other), None, "{other}");
        }
    }
}

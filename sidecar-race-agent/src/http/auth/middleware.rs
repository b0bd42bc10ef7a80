//! The middleware of the protected routes: the token from `Authorization: Bearer` or
//! `X-Sidecar-Race-Token`, the caller's address for its review budget, and the
//! answer for each verdict.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
};

use axum::{
    extract::{ConnectInfo, Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::api::PROXIED_TOKEN;

use super::{
    authenticator::{Authenticator, Verdict},
    decision::Decision,
};

/// The request goes on only when allowed.
pub async fn require(State(auth): State<Arc<Authenticator>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let proxied = headers.get(PROXIED_TOKEN).and_then(|v| v.to_str().ok());
    let token = bearer.or(proxied).map(str::trim).filter(|t| !t.is_empty());
    // The server puts the peer's address on every request; without it (another
    // server), all callers share one budget.
    let source = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let verdict = match token {
        None => Verdict::Decided(Decision::Unauthenticated),
        Some(token) => auth.verdict(token, req.uri().path(), source).await,
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
        Verdict::Throttled => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "too many token reviews from this address\n",
        )
            .into_response(),
    }
}

//! A plain HTTP(S) GET for the report, over kube's client stack (already a dependency:
//! hyper + rustls, connect/read timeouts); no Kubernetes involved.

use std::time::Duration;

use http_body_util::BodyExt;
use kube::client::Body;

use super::error::ReportError;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Range queries over a week of a large fleet can take a while.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The most the report reads of one answer (Prometheus' or an agent's): an agent's
/// full history (10,000 incidents) is ~11 MB.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// A base URL to GET paths from; `what` names it in errors ("Prometheus", "agent").
pub(crate) struct Endpoint {
    pub what: &'static str,
    pub url: String,
    client: kube::Client,
}

/// A response of any status, with its body.
pub(crate) struct Answer {
    pub status: u16,
    pub body: String,
}

impl Endpoint {
    pub fn new(what: &'static str, url: &str) -> Result<Self, ReportError> {
        Self::with_token(what, url, None)
    }

    /// As `new`, sending `token` as a bearer token when given.
    pub fn with_token(
        what: &'static str,
        url: &str,
        token: Option<&str>,
    ) -> Result<Self, ReportError> {
        let client = crate::outbound::client(url, CONNECT_TIMEOUT, READ_TIMEOUT, token).map_err(
            |reason| ReportError::BadUrl {
                what,
                url: url.to_string(),
                reason,
            },
        )?;
        Ok(Self {
            what,
            url: url.to_string(),
            client,
        })
    }

    /// GETs `path_and_query` (below the base URL's path). Only failing to get an answer
    /// is an error here: callers read error statuses' bodies (Prometheus explains them).
    pub async fn get(&self, path_and_query: &str) -> Result<Answer, ReportError> {
        let unreachable = |reason: String| ReportError::Unreachable {
            what: self.what,
            url: self.url.clone(),
            reason,
        };
        let req = http::Request::get(path_and_query)
            .body(Body::empty())
            .map_err(|e| unreachable(e.to_string()))?;
        let res = self
            .client
            .send(req)
            .await
            .map_err(|e| unreachable(root_cause(&e)))?;
        let status = res.status().as_u16();
        let too_large = || ReportError::TooLarge {
            what: self.what,
            url: self.url.clone(),
            path: path_and_query.to_string(),
            limit_mib: MAX_BODY_BYTES >> 20,
        };
        let declared = res
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
            return Err(too_large());
        }
        let bytes = read_capped(res.into_body())
            .await
            .map_err(|e| e.map_or_else(too_large, |e| unreachable(root_cause(&e))))?;
        Ok(Answer {
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    /// The error for a non-2xx answer without a better explanation.
    pub fn http_error(&self, path: &str, answer: &Answer) -> ReportError {
        ReportError::Http {
            what: self.what,
            url: self.url.clone(),
            path: path.to_string(),
            status: answer.status,
            body: snippet(&answer.body),
        }
    }
}

/// A body of at most `MAX_BODY_BYTES`; `Err(None)` when it is larger.
pub(crate) async fn read_capped(mut body: Body) -> Result<Vec<u8>, Option<kube::Error>> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Some)?;
        if let Some(data) = frame.data_ref() {
            if bytes.len() + data.len() > MAX_BODY_BYTES {
                return Err(None);
            }
            bytes.extend_from_slice(data);
        }
    }
    Ok(bytes)
}

/// The innermost cause says what went wrong ("Connection refused (os error 111)");
/// the outer layers only say that a request failed ("ServiceError: client error").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// The first line of a body, short enough for a one-sentence error.
pub(crate) fn snippet(body: &str) -> String {
    let line = body.trim().lines().next().unwrap_or("").trim();
    match line.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None if line.is_empty() => "(empty body)".into(),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn urls_are_checked() {
        for bad in ["prometheus:9090", "ftp://p", "http://p:9090/?x=1", "::"] {
            assert!(
                matches!(
                    Endpoint::new("Prometheus", bad),
                    Err(ReportError::BadUrl { .. })
                ),
                "{bad}"
            );
        }
        assert!(Endpoint::new("Prometheus", "https://p.example/prometheus/").is_ok());
    }

    #[test]
    fn snippets_are_one_short_line() {
        assert_eq!(
            snippet("\n  404 page not found\nmore"),
            "404 page not found"
        );
        assert_eq!(snippet(""), "(empty body)");
        assert_eq!(snippet(&"x".repeat(300)).chars().count(), 201);
    }
}

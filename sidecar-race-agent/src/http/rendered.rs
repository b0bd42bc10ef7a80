//! `/metrics` bodies rendered once and shared: scrapes within a second of a rendering
//! get the same bytes (reference-counted, sent in slices), so 128 scrapers near the
//! series cap hold one body, not 128.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::sinks::metrics::Metrics;

/// How long a rendered body is served again.
pub const REUSE_FOR: Duration = Duration::from_secs(1);

/// The exposition formats `/metrics` answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus' classic text format (0.0.4).
    Classic,
}

/// The last body of each format and when it was rendered. Scrapes wait on the lock
/// while one renders, then reuse what it rendered.
#[derive(Default)]
pub struct Rendered {
    last: tokio::sync::Mutex<[Option<(Instant, Bytes)>; 2]>,
}

impl Rendered {
    /// The body in `format`: the last one if rendered within `REUSE_FOR`, else a new
    /// one (rendered off the async workers, under the metrics lock).
    pub async fn body(
        &self,
        metrics: &Arc<Mutex<Metrics>>,
        format: Format,
    ) -> Result<Bytes, tokio::task::JoinError> {
        let mut last = self.last.lock().await;
        let slot = &mut last[format as usize];
        if let Some((at, body)) = slot.as_ref()
            && at.elapsed() < REUSE_FOR
        {
            return Ok(body.clone());
        }
        // The old body is let go before the new one is built.
        *slot = None;
        let metrics = metrics.clone();
        let body = tokio::task::spawn_blocking(move || {
            let m = metrics.lock();
            Bytes::from(match format {
                Format::OpenMetrics => m.encode(),
                Format::Classic => m.encode_classic(),
            })
        })
        .await?;
        *slot = Some((Instant::now(), body.clone()));
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn scrapes_within_a_second_share_one_body() {
        let metrics = Arc::new(Mutex::new(Metrics::new(false, "0.1.0", "k")));
        let rendered = Rendered::default();
        let a = rendered.body(&metrics, Format::OpenMetrics).await.unwrap();
        let b = rendered.body(&metrics, Format::OpenMetrics).await.unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same bytes, not a copy");
        let c = rendered.body(&metrics, Format::Classic).await.unwrap();
        assert!(!c.ends_with(b"# EOF\n") && a.ends_with(b"# EOF\n"));
        tokio::time::sleep(REUSE_FOR).await;
        let d = rendered.body(&metrics, Format::OpenMetrics).await.unwrap();
        assert_ne!(a.as_ptr(), d.as_ptr(), "rendered anew after a second");
    }
}

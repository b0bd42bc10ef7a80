//! The admission policy (deploy/admission/policy.yaml): lint's static rules as a
//! ValidatingAdmissionPolicy, generated from the known-sidecar table
//! (data/known-sidecars.yaml) and lint's own scanners, so the API server and lint
//! recognise the same sidecars, ports and sleeps. `tests/admission_policy.rs` fails
//! when the committed file differs from [`policy_yaml`] (`UPDATE_GOLDEN=1` rewrites
//! it and the chart's copy). docs/admission.md says what it catches and what it
//! cannot see.

pub mod cel;
pub mod policy;

pub use self::policy::{JUDGED, NAME, policy_yaml};

//! `--pods-from`: which source the agent reads pods from, as the flag spells it.

use std::{fmt, path::PathBuf, str::FromStr};

/// `--pods-from`.
#[derive(Debug, Clone, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum PodSourceSpec {
    Api,
    Kubelet,
    File(PathBuf),
    None,
}

impl PodSourceSpec {
    /// `api` inside a cluster (the service-account environment is there), else `none`.
    pub fn default_for_environment() -> Self {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            PodSourceSpec::Api
        } else {
            PodSourceSpec::None
        }
    }

    /// The `source` label of `pod_source_errors`.
    pub fn name(&self) -> &'static str {
        self.into()
    }
}

impl FromStr for PodSourceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "api" => Ok(PodSourceSpec::Api),
            "kubelet" => Ok(PodSourceSpec::Kubelet),
            "none" => Ok(PodSourceSpec::None),
            _ => match s.strip_prefix("file:") {
                Some(path) if !path.is_empty() => Ok(PodSourceSpec::File(path.into())),
                _ => Err(format!(
                    "`{s}` is not a pod source: use api, kubelet, file:PATH or none"
                )),
            },
        }
    }
}

impl fmt::Display for PodSourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PodSourceSpec::File(p) => write!(f, "file:{}", p.display()),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!("api".parse(), Ok(PodSourceSpec::Api));
        assert_eq!("kubelet".parse(), Ok(PodSourceSpec::Kubelet));
        assert_eq!("none".parse(), Ok(PodSourceSpec::None));
        assert_eq!(
            "file:/tmp/pods.json".parse(),
            Ok(PodSourceSpec::File("/tmp/pods.json".into()))
        );
        assert!("file:".parse::<PodSourceSpec>().is_err());
        let err = "apiserver".parse::<PodSourceSpec>().unwrap_err();
        assert!(err.contains("api, kubelet, file:PATH or none"), "{err}");
        assert_eq!(PodSourceSpec::File("/x".into()).to_string(), "file:/x");
    }
}

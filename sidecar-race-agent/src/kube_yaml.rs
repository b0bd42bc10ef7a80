//! Kubernetes objects written as YAML, read as the API server reads them. kubectl and
//! the API server parse YAML with go-yaml's YAML 1.1 rules, where a plain `0400` is
//! octal (256); YAML 1.2, the parser's default, has no such integer and reads it as the
//! float 400.0, which a typed field (`defaultMode: 0400` of a Secret volume, common in
//! real manifests) then refuses. So numbers with a leading zero are octal here too.

use serde::de::DeserializeOwned;

/// One YAML document, with Kubernetes' numbers.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    serde_saphyr::from_str_with_options(text, options)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    #[test]
    fn a_leading_zero_is_octal_as_kubectl_reads_it_and_other_numbers_are_unchanged() {
        let v: Value = super::from_str(
            "defaultMode: 0400\nmode: 0644\nport: 9965\nratio: 0.5\nzero: 0\nversion: '0400'\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"defaultMode": 256, "mode": 420, "port": 9965, "ratio": 0.5, "zero": 0, "version": "0400"})
        );
    }
}

//! The agent's software bill of materials: CycloneDX 1.6 JSON of the crates built into
//! the binary for one target, written beside the image and attached to it as an OCI
//! referrer (`layout.rs`).
//!
//! The crates come from `cargo tree -e normal` (what `cargo build -p sidecar-race-agent
//! --target <triple>` links, with its features resolved alone, not unified with the test
//! kit's), plus the embedded eBPF object's crates (`sidecar-race-ebpf` for
//! `bpfel-unknown-none`). Dev- and build-dependencies are left out. Proc macros and
//! what only they use run at compile time and are not in the binary: they are listed
//! with scope `excluded`. Hashes are Cargo.lock's checksums (SHA-256 of each `.crate`).
//!
//! Reproducible: no timestamp, the serial number is a name-based UUID (version 5) of the
//! document itself, and every list is sorted.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use super::release::VERSION;
use crate::run::{cargo, workspace_root};

pub const MEDIA_TYPE: &str = "application/vnd.cyclonedx+json";
const SPEC_VERSION: &str = "1.6";
const AGENT: &str = "sidecar-race-agent";
const EBPF: &str = "sidecar-race-ebpf";
const EBPF_TARGET: &str = "bpfel-unknown-none";
const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

/// One crate of a dependency tree.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Crate {
    name: String,
    version: String,
    license: String,
    repository: String,
    proc_macro: bool,
}

impl Crate {
    fn key(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// Crates by `name@version`, and who depends on whom (by key).
#[derive(Debug, Default)]
struct Tree {
    root: String,
    crates: BTreeMap<String, Crate>,
    edges: BTreeMap<String, BTreeSet<String>>,
}

const TREE_FORMAT: &str = "{p}\t{l}\t{r}";

/// `cargo tree` of `package` for `target`: normal dependencies only, one crate per line.
fn cargo_tree(package: &str, target: &str) -> anyhow::Result<Tree> {
    let out = cargo()
        .args(["tree", "--locked", "--offline", "-e", "normal"])
        .args(["-p", package, "--target", target])
        .args(["--prefix", "depth", "--format", TREE_FORMAT])
        .output()
        .context("cannot run cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p {package} --target {target} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_tree(&String::from_utf8(out.stdout)?)
}

/// Parses `--prefix depth` output: `<depth><name> v<version>[ (…)]\t<license>\t<repo>`,
/// with ` (*)` after a crate already shown.
fn parse_tree(text: &str) -> anyhow::Result<Tree> {
    let mut tree = Tree::default();
    let mut path: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let digits = line.chars().take_while(char::is_ascii_digit).count();
        let depth: usize = line[..digits]
            .parse()
            .with_context(|| format!("no depth in cargo tree line {line:?}"))?;
        let line = line[digits..].trim_end_matches(" (*)");
        let mut fields = line.split('\t');
        let package = fields.next().unwrap_or_default();
        let license = fields.next().unwrap_or_default().trim();
        let repository = fields.next().unwrap_or_default().trim();
        let mut words = package.split(' ');
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            bail!("no name and version in cargo tree line {line:?}");
        };
        let krate = Crate {
            name: name.to_string(),
            version: version.trim_start_matches('v').to_string(),
            // Old manifests write `MIT/Apache-2.0`: the SPDX expression is `MIT OR Apache-2.0`.
            license: license.replace('/', " OR "),
            repository: repository.to_string(),
            proc_macro: package.contains("(proc-macro)"),
        };
        let key = krate.key();
        path.truncate(depth);
        match path.last() {
            Some(parent) => {
                tree.edges
                    .entry(parent.clone())
                    .or_default()
                    .insert(key.clone());
            }
            None => tree.root = key.clone(),
        }
        path.push(key.clone());
        tree.crates.insert(key, krate);
    }
    if tree.root.is_empty() {
        bail!("cargo tree printed no crates");
    }
    Ok(tree)
}

/// The keys reachable from `root` without going into a proc macro: what is linked.
fn linked(tree: &Tree) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![tree.root.clone()];
    while let Some(key) = todo.pop() {
        if tree.crates[&key].proc_macro || !seen.insert(key.clone()) {
            continue;
        }
        todo.extend(tree.edges.get(&key).into_iter().flatten().cloned());
    }
    seen
}

/// `name@version` → (source, checksum) of every package in Cargo.lock.
fn lock_entries(lock: &str) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |k: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(k)
                    .and_then(|v| v.trim().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_string())
            })
        };
        if let (Some(name), Some(version)) = (field("name "), field("version ")) {
            out.insert(
                format!("{name}@{version}"),
                (
                    field("source ").unwrap_or_default(),
                    field("checksum ").unwrap_or_default(),
                ),
            );
        }
    }
    out
}

/// A CycloneDX component for a crate.
fn component(
    krate: &Crate,
    lock: &BTreeMap<String, (String, String)>,
    built_into: &[&str],
) -> Value {
    let key = krate.key();
    let mut c = json!({
        "type": if krate.name == AGENT { "application" } else { "library" },
        "bom-ref": key,
        "name": krate.name,
        "version": krate.version,
    });
    if !krate.license.is_empty() {
        c["licenses"] = json!([{"expression": krate.license}]);
    }
    if let Some((source, checksum)) = lock.get(&key) {
        if source == CRATES_IO {
            c["purl"] = json!(format!("pkg:cargo/{}@{}", krate.name, krate.version));
        }
        if !checksum.is_empty() {
            c["hashes"] = json!([{"alg": "SHA-256", "content": checksum}]);
        }
    }
    if !krate.repository.is_empty() {
        c["externalReferences"] = json!([{"type": "vcs", "url": krate.repository}]);
    }
    if built_into.is_empty() {
        c["scope"] = json!("excluded");
        c["properties"] = json!([{"name": "sidecar-race:built-into", "value": "nothing: compile time only (a proc macro or what only proc macros use)"}]);
    } else {
        c["scope"] = json!("required");
        c["properties"] = Value::Array(
            built_into
                .iter()
                .map(|b| json!({"name": "sidecar-race:built-into", "value": b}))
                .collect(),
        );
    }
    c
}

/// The SBOM of the agent built for `triple`, as the bytes written and attached.
pub fn cyclonedx(triple: &str) -> anyhow::Result<Vec<u8>> {
    let agent = cargo_tree(AGENT, triple)?;
    let ebpf = cargo_tree(EBPF, EBPF_TARGET)?;
    let lock = lock_entries(&std::fs::read_to_string(
        workspace_root().join("Cargo.lock"),
    )?);
    document(triple, &agent, &ebpf, &lock)
}

fn document(
    triple: &str,
    agent: &Tree,
    ebpf: &Tree,
    lock: &BTreeMap<String, (String, String)>,
) -> anyhow::Result<Vec<u8>> {
    let in_agent = linked(agent);
    let in_ebpf = linked(ebpf);
    let agent_label = format!("the agent binary ({triple})");
    let ebpf_label = format!("the agent's embedded eBPF object ({EBPF_TARGET})");
    let mut crates = agent.crates.clone();
    crates.extend(ebpf.crates.clone());
    let mut edges = agent.edges.clone();
    for (from, to) in &ebpf.edges {
        edges.entry(from.clone()).or_default().extend(to.clone());
    }
    let mut components = Vec::new();
    for (key, krate) in &crates {
        if *key == agent.root {
            continue;
        }
        let mut built_into = Vec::new();
        if in_agent.contains(key) {
            built_into.push(agent_label.as_str());
        }
        if in_ebpf.contains(key) {
            built_into.push(ebpf_label.as_str());
        }
        components.push(component(krate, lock, &built_into));
    }
    let dependencies: Vec<Value> = crates
        .keys()
        .map(|key| {
            let on: Vec<&String> = edges.get(key).into_iter().flatten().collect();
            json!({"ref": key, "dependsOn": on})
        })
        .collect();
    let mut bom = json!({
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "tools": {"components": [{
                "type": "application",
                "name": "cargo xtask image",
                "version": VERSION,
            }]},
            "component": component(&crates[&agent.root], lock, &[agent_label.as_str()]),
            "properties": [{"name": "sidecar-race:target", "value": triple}],
        },
        "components": components,
        "dependencies": dependencies,
    });
    bom["serialNumber"] = json!(format!("urn:uuid:{}", uuid_v5(&serde_json::to_vec(&bom)?)));
    let mut bytes = serde_json::to_vec_pretty(&bom)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// RFC 9562 name-based UUID (SHA-1, version 5) of `name` in the URL namespace.
fn uuid_v5(name: &[u8]) -> String {
    const NAMESPACE_URL: [u8; 16] = [
        0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30,
        0xc8,
    ];
    let digest = Sha1::new()
        .chain_update(NAMESPACE_URL)
        .chain_update(name)
        .finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT_TREE: &str = "0sidecar-race-agent v0.1.0 (/x/sidecar-race-agent)\tApache-2.0\t\n\
        1tokio v1.54.1\tMIT\thttps://github.com/tokio-rs/tokio\n\
        2tokio-macros v2.6.0 (proc-macro)\tMIT\t\n\
        3syn v2.0.119\tMIT/Apache-2.0\t\n\
        2bytes v1.12.2\tMIT\t\n\
        1bytes v1.12.2\tMIT\t (*)\n\
        1sidecar-race-ebpf v0.1.0 (/x/sidecar-race-ebpf)\tApache-2.0\t\n";
    const EBPF_TREE: &str = "0sidecar-race-ebpf v0.1.0 (/x/sidecar-race-ebpf)\tApache-2.0\t\n\
        1aya-ebpf v0.2.1\tMIT OR Apache-2.0\t\n";
    const LOCK: &str = "version = 4\n\n[[package]]\nname = \"tokio\"\nversion = \"1.54.1\"\n\
        source = \"registry+https://github.com/rust-lang/crates.io-index\"\n\
        checksum = \"abc\"\ndependencies = [\n \"bytes\",\n]\n\n\
        [[package]]\nname = \"sidecar-race-ebpf\"\nversion = \"0.1.0\"\n";

    fn sbom() -> Value {
        let lock = lock_entries(LOCK);
        let bytes = document(
            "x86_64-unknown-linux-gnu",
            &parse_tree(AGENT_TREE).unwrap(),
            &parse_tree(EBPF_TREE).unwrap(),
            &lock,
        )
        .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn find<'a>(bom: &'a Value, key: &str) -> &'a Value {
        bom["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["bom-ref"] == key)
            .unwrap_or_else(|| panic!("{key} missing"))
    }

    #[test]
    fn linked_crates_are_required_and_proc_macros_excluded() {
        let bom = sbom();
        let tokio = find(&bom, "tokio@1.54.1");
        assert_eq!(tokio["scope"], "required");
        assert_eq!(tokio["purl"], "pkg:cargo/tokio@1.54.1");
        assert_eq!(tokio["hashes"][0]["content"], "abc");
        assert_eq!(find(&bom, "tokio-macros@2.6.0")["scope"], "excluded");
        let syn = find(&bom, "syn@2.0.119");
        assert_eq!(syn["scope"], "excluded", "only a proc macro uses it");
        assert_eq!(syn["licenses"][0]["expression"], "MIT OR Apache-2.0");
        let aya = find(&bom, "aya-ebpf@0.2.1");
        assert_eq!(aya["scope"], "required");
        assert!(
            aya["properties"][0]["value"]
                .as_str()
                .unwrap()
                .contains("eBPF object")
        );
        let ebpf = find(&bom, "sidecar-race-ebpf@0.1.0");
        assert_eq!(ebpf["properties"].as_array().unwrap().len(), 2, "{ebpf}");
        assert!(
            ebpf.get("purl").is_none(),
            "a path crate is not on crates.io"
        );
        assert_eq!(bom["metadata"]["component"]["name"], "sidecar-race-agent");
        let deps = bom["dependencies"].as_array().unwrap();
        let of_ebpf = deps
            .iter()
            .find(|d| d["ref"] == "sidecar-race-ebpf@0.1.0")
            .unwrap();
        assert_eq!(of_ebpf["dependsOn"], json!(["aya-ebpf@0.2.1"]));
    }

    #[test]
    fn the_serial_number_is_a_v5_uuid_of_the_content() {
        let (a, b) = (sbom(), sbom());
        assert_eq!(a, b);
        let serial = a["serialNumber"].as_str().unwrap();
        let uuid = serial.strip_prefix("urn:uuid:").unwrap();
        assert_eq!(&uuid[14..15], "5", "{uuid}");
        assert!(matches!(&uuid[19..20], "8" | "9" | "a" | "b"), "{uuid}");
        // Python's uuid.uuid5(uuid.NAMESPACE_URL, "https://example.com").
        assert_eq!(
            uuid_v5(b"https://example.com"),
            "4fd35a71-71ef-5a55-a9d9-aa75c889a6d0"
        );
    }
}

//! A YAML/JSON value that keeps its keys in document order, so `lint --fix` writes a
//! manifest the way its author laid it out (`serde_json::Value` sorts keys).

use std::fmt;

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{MapAccess, SeqAccess, Visitor},
    ser::{SerializeMap, SerializeSeq},
};

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Node::Map(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value at `path` (map keys), if every step exists.
    pub fn at(&self, path: &[&str]) -> Option<&Node> {
        path.iter().try_fold(self, |node, key| node.get(key))
    }

    pub fn at_mut(&mut self, path: &[&str]) -> Option<&mut Node> {
        path.iter().try_fold(self, |node, key| node.get_mut(key))
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_seq_mut(&mut self) -> Option<&mut Vec<Node>> {
        match self {
            Node::Seq(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match self {
            Node::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// Sets `key` (replacing its value in place, or appending it); `self` must be a map.
    pub fn set(&mut self, key: &str, value: Node) {
        if let Node::Map(entries) = self {
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => entries.push((key.to_string(), value)),
            }
        }
    }

    /// Sets `key` right after `after` when it is new (a readable place for it).
    pub fn set_after(&mut self, after: &str, key: &str, value: Node) {
        if let Node::Map(entries) = self {
            if let Some((_, v)) = entries.iter_mut().find(|(k, _)| k == key) {
                *v = value;
                return;
            }
            let at = entries
                .iter()
                .position(|(k, _)| k == after)
                .map_or(entries.len(), |i| i + 1);
            entries.insert(at, (key.to_string(), value));
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<Node> {
        match self {
            Node::Map(entries) => {
                let i = entries.iter().position(|(k, _)| k == key)?;
                Some(entries.remove(i).1)
            }
            _ => None,
        }
    }

    /// The map at `key`, created empty when missing.
    pub fn map_entry(&mut self, key: &str) -> &mut Node {
        if self.get(key).is_none() {
            self.set(key, Node::Map(Vec::new()));
        }
        self.get_mut(key).expect("just set")
    }

    pub fn map(entries: Vec<(&str, Node)>) -> Node {
        Node::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    pub fn str(s: impl Into<String>) -> Node {
        Node::Str(s.into())
    }

    /// The same value as JSON, for typed analysis (`k8s_openapi`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Int(i) => s.serialize_i64(*i),
            Node::UInt(u) => s.serialize_u64(*u),
            Node::Float(f) => s.serialize_f64(*f),
            Node::Str(v) => s.serialize_str(v),
            Node::Seq(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::UInt(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<Node, Node>()? {
            let key = match k {
                Node::Str(s) => s,
                Node::Int(i) => i.to_string(),
                Node::UInt(u) => u.to_string(),
                Node::Bool(b) => b.to_string(),
                other => serde_json::to_string(&other).unwrap_or_default(),
            };
            entries.push((key, v));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_and_round_trips() {
        let text = "kind: Pod\napiVersion: v1\nmetadata:\n  name: x\n  labels:\n    app: \"5432\"\nspec:\n  containers:\n  - name: app\n    image: nginx\n    ports:\n    - containerPort: 80\n";
        let node: Node = serde_saphyr::from_str(text).unwrap();
        let Node::Map(entries) = &node else { panic!() };
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["kind", "apiVersion", "metadata", "spec"]);
        let out = serde_saphyr::to_string(&node).unwrap();
        let again: Node = serde_saphyr::from_str(&out).unwrap();
        assert_eq!(again, node, "{out}");
        assert_eq!(
            node.at(&["metadata", "labels", "app"])
                .and_then(Node::as_str),
            Some("5432"),
            "a quoted number stays a string"
        );
        assert_eq!(
            node.to_json()["spec"]["containers"][0]["ports"][0]["containerPort"],
            80
        );
    }
}

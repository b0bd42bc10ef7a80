//! Maps keyed by something JSON cannot name (an enum, a tuple), serialized as a list
//! of `[key, value]` pairs: the checkpoint carries such maps of the detector.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub fn serialize<'a, M, K, V, S>(map: &'a M, s: S) -> Result<S::Ok, S::Error>
where
    &'a M: IntoIterator<Item = (&'a K, &'a V)>,
    K: Serialize + 'a,
    V: Serialize + 'a,
    S: Serializer,
{
    s.collect_seq(map)
}

pub fn deserialize<'de, M, K, V, D>(d: D) -> Result<M, D::Error>
where
    M: FromIterator<(K, V)>,
    K: Deserialize<'de>,
    V: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
}

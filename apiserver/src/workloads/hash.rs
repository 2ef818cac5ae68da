//! The `pod-template-hash` (and StatefulSet `controller-revision-hash`) of a pod template, as
//! kube-controller-manager's `ComputeHash` renders it: FNV-32a, then the decimal digits of the
//! sum mapped through apimachinery's `SafeEncodeString` alphabet. The real controller hashes a
//! Go struct dump (go-spew), which cannot be reproduced here; this hashes the template's
//! normalised JSON instead, so the values look like a cluster's but differ from them.

use serde_json::{Map, Value};

/// apimachinery's `rand.SafeEncodeString` alphabet: no vowels, no look-alike characters.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1a, 32 bits (Go's `hash/fnv.New32a`).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// apimachinery's `SafeEncodeString`: each character to the alphabet, by its code.
pub fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| ALPHANUMS[c as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// A template with what decoding into a Go struct would lose removed (nulls, empty maps and
/// lists) and keys sorted, so a template round-tripped by a client (`kubectl rollout undo`
/// adds `creationTimestamp: null` and `resources: {}`) compares and hashes as the original.
pub fn normalise(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                let n = normalise(&m[k]);
                if !is_empty(&n) {
                    out.insert(k.clone(), n);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(normalise).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The template without the label a controller adds (`pod-template-hash`), normalised:
/// what "the same template" means (the real `EqualIgnoreHash`).
pub fn without_hash(template: &Value, label: &str) -> Value {
    let mut t = template.clone();
    if let Some(l) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        l.remove(label);
    }
    normalise(&t)
}

/// `ComputeHash(template, collisionCount)`.
pub fn template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut bytes = serde_json::to_vec(&normalise(template)).expect("JSON values serialise");
    if let Some(c) = collision_count {
        // Go writes the uint32 little-endian into an 8-byte buffer.
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(c as u32).to_le_bytes());
        bytes.extend_from_slice(&buf);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fnv32a_and_safe_encoding_match_go() {
        // Reference values of Go's hash/fnv New32a.
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
        // SafeEncodeString("0123456789"): '0' is 48, 48 % 27 = 21 → '4'; '6' is 54 → 'b'.
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }

    #[test]
    fn the_hash_ignores_what_a_round_trip_adds_and_sees_the_collision_count() {
        let t = json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}});
        let round_tripped = json!({"metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
            "spec": {"containers": [{"image": "nginx", "name": "nginx", "resources": {}}]}});
        let h = template_hash(&t, None);
        assert_eq!(h, template_hash(&round_tripped, None));
        assert!(h.chars().all(|c| ALPHANUMS.contains(&(c as u8))), "{h}");
        assert!((1..=10).contains(&h.len()), "{h}");
        assert_ne!(h, template_hash(&t, Some(1)));
        let other = json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}});
        assert_ne!(h, template_hash(&other, None));
        let mut labelled = t.clone();
        labelled["metadata"]["labels"]["pod-template-hash"] = json!(h);
        assert_eq!(without_hash(&labelled, "pod-template-hash"), normalise(&t));
    }
}

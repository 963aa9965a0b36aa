//! The problems of a JSON body that does not fit its request type, all of
//! them (spec §7: `error` lists every problem, `param` names the first).
//! serde stops at the first error, so each failing spot is recorded, given a
//! stand-in value that lets deserialisation get past it, and the body tried
//! again.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use serde_path_to_error::Segment;

use crate::error::FieldProblem;

/// Deserialisations tried at most: enough for any body a person writes,
/// and a bound on the work a hostile one causes.
const MAX_ATTEMPTS: usize = 64;

/// Why a body did not deserialise into its type, and where.
#[derive(Debug)]
pub struct Failure {
    /// The spot in the body: a missing field's path ends with its name.
    spot: Vec<Segment>,
    pub problem: FieldProblem,
    missing: bool,
}

/// The first failure of `value` as a `T`, if any.
pub fn first_failure<T: DeserializeOwned>(value: &Value) -> Option<Failure> {
    let e = serde_path_to_error::deserialize::<_, T>(value).err()?;
    Some(failure(e.path().iter().cloned().collect(), e.into_inner()))
}

/// A failure from serde's error at `spot`, a missing field named at its own
/// path (serde reports it at the object that lacks it).
pub fn failure(mut spot: Vec<Segment>, e: serde_json::Error) -> Failure {
    let text = e.to_string();
    let missing = text
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field.to_string());
    let message = match &missing {
        Some(field) => {
            spot.push(Segment::Map { key: field.clone() });
            "is required".to_string()
        }
        None => text,
    };
    Failure {
        problem: FieldProblem {
            param: param(&spot),
            message,
        },
        spot,
        missing: missing.is_some(),
    }
}

/// The path as `param` shows it (`to[1]`, `headers.X-Foo`); the whole
/// body is `body`.
fn param(spot: &[Segment]) -> String {
    let mut out = String::new();
    for segment in spot {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    if out.is_empty() { "body".into() } else { out }
}

/// Every problem of `value` as a `T`, starting from its first failure, in
/// the order serde meets them; one per spot.
pub fn all<T: DeserializeOwned>(mut value: Value, first: Failure) -> Vec<FieldProblem> {
    let mut found = vec![first.problem.clone()];
    // Spots given a stand-in.
    let mut placed: Vec<String> = Vec::new();
    let mut current = first;
    let mut attempts = 1;
    'rounds: while attempts < MAX_ATTEMPTS {
        // Stand-ins, the first that moves deserialisation past this spot
        // wins; `None` removes the field (an optional one then passes).
        let stand_ins = [
            None,
            Some(Value::Null),
            Some(Value::Bool(false)),
            Some(Value::from(0)),
            Some(Value::String(String::new())),
            Some(Value::Array(Vec::new())),
            Some(Value::Object(Map::new())),
        ];
        for stand_in in stand_ins {
            if current.missing && stand_in.is_none() {
                continue;
            }
            if attempts >= MAX_ATTEMPTS {
                break 'rounds;
            }
            let Some(old) = put(&mut value, &current.spot, stand_in) else {
                break 'rounds;
            };
            attempts += 1;
            match first_failure::<T>(&value) {
                None => break 'rounds,
                Some(next) if next.problem.param != current.problem.param => {
                    placed.push(current.problem.param.clone());
                    // A problem inside a stand-in (an empty object lacking
                    // its fields) is not the client's: it is only passed.
                    let ours = !placed.iter().any(|p| inside(p, &next.problem.param));
                    if ours && !found.iter().any(|p| p.param == next.problem.param) {
                        found.push(next.problem.clone());
                    }
                    current = next;
                    continue 'rounds;
                }
                Some(_) => {
                    put(&mut value, &current.spot, old);
                }
            }
        }
        break;
    }
    found
}

/// Whether `param` names a spot within `outer`.
fn inside(outer: &str, param: &str) -> bool {
    param
        .strip_prefix(outer)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// Puts `new` at `spot` (removes the field for `None`) and gives back what
/// was there; `None` when the spot cannot be reached in `value`.
fn put(value: &mut Value, spot: &[Segment], new: Option<Value>) -> Option<Option<Value>> {
    let (last, parents) = spot.split_last()?;
    let mut at = value;
    for segment in parents {
        at = match (segment, at) {
            (Segment::Seq { index }, Value::Array(items)) => items.get_mut(*index)?,
            (Segment::Map { key } | Segment::Enum { variant: key }, Value::Object(fields)) => {
                fields.get_mut(key)?
            }
            _ => return None,
        };
    }
    match (last, at) {
        (Segment::Seq { index }, Value::Array(items)) => {
            let slot = items.get_mut(*index)?;
            // An array element cannot be removed without moving the others.
            let new = new.unwrap_or(Value::Null);
            Some(Some(std::mem::replace(slot, new)))
        }
        (Segment::Map { key } | Segment::Enum { variant: key }, Value::Object(fields)) => {
            Some(match new {
                Some(v) => fields.insert(key.clone(), v),
                None => fields.remove(key),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Inner {
        name: String,
    }

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Body {
        name: String,
        count: Option<u32>,
        flag: bool,
        items: Vec<Inner>,
    }

    fn problems(v: Value) -> Vec<(String, String)> {
        let first = first_failure::<Body>(&v).expect("fails");
        all::<Body>(v, first)
            .into_iter()
            .map(|p| (p.param, p.message))
            .collect()
    }

    #[test]
    fn missing_fields_are_named_at_their_path() {
        let got = problems(json!({"flag": true, "items": [{}]}));
        let params: Vec<_> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(params, ["items[0].name", "name"]);
        assert!(got.iter().all(|(_, m)| m == "is required"), "{got:?}");
    }

    #[test]
    fn every_wrong_field_is_listed_in_body_order() {
        let got = problems(json!({"name": 1, "count": "x", "flag": "yes", "items": []}));
        let params: Vec<_> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(params, ["name", "count", "flag"]);
        assert!(got[0].1.contains("expected a string"), "{got:?}");
    }

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Nested {
        inner: Inner,
        flag: bool,
    }

    #[test]
    fn a_stand_in_adds_no_problem_of_its_own() {
        let v = json!({"inner": 5, "flag": "no"});
        let first = first_failure::<Nested>(&v).expect("fails");
        let params: Vec<_> = all::<Nested>(v, first)
            .into_iter()
            .map(|p| p.param)
            .collect();
        assert_eq!(params, ["inner", "flag"]);
    }

    #[test]
    fn a_wrong_root_is_the_body() {
        assert_eq!(problems(json!(5))[0].0, "body");
        assert_eq!(problems(json!("x")).len(), 1);
    }

    #[test]
    fn work_is_bounded() {
        let items: Vec<Value> = (0..500).map(|_| json!({"name": 1})).collect();
        let got = problems(json!({"name": "a", "flag": true, "items": items}));
        assert!(got.len() < MAX_ATTEMPTS, "{}", got.len());
        assert_eq!(got[0].0, "items[0].name");
    }
}

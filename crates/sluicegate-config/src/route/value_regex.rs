//! A `~regex` header value of a route's `match`, compiled once when the
//! config loads into a full DFA: a match walks its table, with no cache to
//! take from a pool (the `regex` crate's matchers lock one on every thread
//! but the first), no allocation and no lock. The whole value must match.

use regex_automata::dfa::dense::{Builder, Config, DFA};
use regex_automata::dfa::{Automaton, StartKind};
use regex_automata::util::start;
use regex_automata::{Anchored, Input};

/// Largest table one header regex may compile to.
const SIZE_LIMIT: usize = 1 << 20;

/// A compiled header regex, anchored at both ends.
#[derive(Clone)]
pub struct ValueRegex {
    dfa: Box<DFA<Vec<u32>>>,
}

impl std::fmt::Debug for ValueRegex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValueRegex({} bytes)", self.dfa.memory_usage())
    }
}

impl ValueRegex {
    /// Compiles `re` (without its `~`): a message when it does not parse,
    /// or needs more than the table allows, or uses what a DFA cannot
    /// match (a Unicode `\b`).
    pub fn new(re: &str) -> Result<ValueRegex, String> {
        let anchored = format!("^(?:{re})$");
        let dfa = Builder::new()
            .configure(
                Config::new()
                    .start_kind(StartKind::Anchored)
                    .dfa_size_limit(Some(SIZE_LIMIT))
                    .determinize_size_limit(Some(4 * SIZE_LIMIT)),
            )
            .build(&anchored)
            .map_err(|e| {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text = format!("{text}: {s}");
                    source = s.source();
                }
                text
            })?;
        Ok(ValueRegex { dfa: Box::new(dfa) })
    }

    /// Whether the whole of `value` matches.
    #[inline]
    pub fn is_match(&self, value: &[u8]) -> bool {
        let input = Input::new(value).anchored(Anchored::Yes).earliest(true);
        // No quit bytes are set, so a search cannot fail.
        matches!(self.dfa.try_search_fwd(&input), Ok(Some(_)))
    }

    /// Whether the whole of the bytes `value` yields matches, fed one at a
    /// time (a path segment as it is percent-decoded, say): no buffer.
    pub fn is_match_bytes(&self, value: impl IntoIterator<Item = u8>) -> bool {
        let dfa = &*self.dfa;
        let Ok(mut sid) = dfa.start_state(&start::Config::new().anchored(Anchored::Yes)) else {
            return false;
        };
        for b in value {
            sid = dfa.next_state(sid, b);
            if dfa.is_dead_state(sid) {
                return false;
            }
        }
        dfa.is_match_state(dfa.next_eoi_state(sid))
    }
}

/// The regex crate's message on one line: syntax errors come with a caret
/// diagram over several lines, of which the `error: ...` line says what is wrong.
pub(crate) fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or_else(|| text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_values_only() {
        let re = ValueRegex::new("v[0-9]+|beta").unwrap();
        for yes in ["v1", "v123", "beta"] {
            assert!(re.is_match(yes.as_bytes()), "{yes}");
        }
        for no in ["", "v", "av1", "v1x", "betax", "xbeta", "v1\n"] {
            assert!(!re.is_match(no.as_bytes()), "{no}");
        }
        assert!(ValueRegex::new(r"[\w-]+")
            .unwrap()
            .is_match("été-1".as_bytes()));
        assert!(ValueRegex::new(".*").unwrap().is_match(b""));
        assert!(!ValueRegex::new("a").unwrap().is_match(b"\xffa"));
        for (re, v) in [("v[0-9]+|beta", "v12"), (".*", ""), (r"[\w-]+", "été-1")] {
            let re = ValueRegex::new(re).unwrap();
            assert!(re.is_match_bytes(v.bytes()), "{v}");
            assert!(!re.is_match_bytes(format!("{v}\n").bytes()), "{v}");
        }
    }

    #[test]
    fn refused() {
        assert!(ValueRegex::new("(").is_err());
        let e = ValueRegex::new(r"\bword\b").unwrap_err();
        assert!(e.contains("word boundaries"), "{e}");
        assert!(ValueRegex::new(r"(?-u:\b)word(?-u:\b)").is_ok());
        assert!(ValueRegex::new(r"\w{50}").is_err());
    }
}

//! Leases on path patterns: what a pattern covers, and whether two patterns can collide.
//!
//! Pure rules only: the ledger that grants leases, their expiry and their wake-ups live behind
//! the ports.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{BusError, BusResult};

/// Longest accepted pattern or path, in characters (Unicode scalar values, as JSON Schema's
/// `maxLength` counts them).
pub const MAX_LEASE_PATTERN_CHARS: usize = 512;

/// Most `/`-separated segments in a pattern or path.
pub const MAX_LEASE_SEGMENTS: usize = 32;

/// Characters refused anywhere in a pattern or path: the other glob dialects' operators
/// (`?`, `[`, `]`, `{`, `}`) and their escape (`\`), so that no pattern means one thing here and
/// another to a tool that reads it as a git or shell glob.
const REFUSED: [char; 6] = ['?', '[', ']', '{', '}', '\\'];

/// A pattern of paths a lease is taken on, e.g. `src/**`, `docs/*.md`, `Cargo.toml`.
///
/// Shape: one or more segments separated by `/`. Within a segment, `*` matches any run of
/// characters (possibly none) that contains no `/`; a segment that is exactly `**` matches any
/// number of whole segments, zero included (so `src/**` covers `src`, `src/a` and `src/a/b.rs`,
/// and `**` covers every path). Matching is by Unicode scalar value: case-sensitive, no
/// normalisation. A pattern without `*` is a literal name and covers exactly the path spelled the
/// same. `**` may appear more than once (`a/**/b/**`), as in other globs; [`LeasePattern::covers`]
/// and [`LeasePattern::overlaps`] are exact for every such pattern.
///
/// Refused with [`BusError::Invalid`] by [`LeasePattern::parse`]:
/// - an empty pattern, or more than [`MAX_LEASE_PATTERN_CHARS`] characters, or more than
///   [`MAX_LEASE_SEGMENTS`] segments;
/// - an empty segment (a leading, trailing or doubled `/`), a `.` or a `..` segment;
/// - `?`, `[`, `]`, `{`, `}`, `\` or a control character anywhere;
/// - `**` inside a longer segment (`a**`, `**.rs`): `**` is only a whole segment.
///
/// A concrete path (what a lease is checked against, see [`validate_lease_path`]) follows the
/// same rules and has no `*` at all.
///
/// Serialises as its text; deserialising validates it the same way. `Display` is the text as
/// given.
///
/// ```
/// use crewbus_domain::LeasePattern;
///
/// let src: LeasePattern = "src/**".parse().unwrap();
/// assert!(src.covers("src/lease.rs"));
/// assert!(src.overlaps(&"*/lease.rs".parse().unwrap()));
/// assert!(!src.overlaps(&"docs/**".parse().unwrap()));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LeasePattern {
    text: String,
    segments: Vec<Segment>,
}

/// One parsed segment of a pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Segment {
    /// `**`: zero or more whole segments.
    AnySegments,
    /// A glob within one segment: literal characters and `*`.
    Glob(Vec<Tok>),
}

/// One element of a single-segment glob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Tok {
    /// `*`: any run of characters, none included.
    Star,
    /// A literal character.
    Char(char),
}

impl LeasePattern {
    /// Parses and validates `text` (rules on the type). Errors: [`BusError::Invalid`] naming the
    /// broken rule.
    pub fn parse(text: &str) -> BusResult<Self> {
        let segments = checked_segments(text, "lease pattern", true)?
            .into_iter()
            .map(|seg| {
                if seg == "**" {
                    Segment::AnySegments
                } else {
                    Segment::Glob(
                        seg.chars()
                            .map(|c| if c == '*' { Tok::Star } else { Tok::Char(c) })
                            .collect(),
                    )
                }
            })
            .collect();
        Ok(LeasePattern {
            text: text.to_owned(),
            segments,
        })
    }

    /// The pattern's text, as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern has no wildcard: it covers exactly the one path spelled like it.
    pub fn is_literal(&self) -> bool {
        !self.text.contains('*')
    }

    /// Whether the concrete `path` matches this pattern.
    ///
    /// `path` must pass [`validate_lease_path`] (the pattern rules, no `*`); a path that does not
    /// is covered by no pattern, so this answers `false` for it rather than an error. Cost:
    /// O(pattern length × path length) character comparisons, at most about 512 × 512.
    pub fn covers(&self, path: &str) -> bool {
        let Ok(segments) = checked_segments(path, "lease path", false) else {
            return false;
        };
        let path: Vec<Vec<char>> = segments.iter().map(|s| s.chars().collect()).collect();
        let (m, n) = (self.segments.len(), path.len());
        // reach[i][j]: the first i segments of the pattern can match the first j of the path.
        let mut reach = vec![vec![false; n + 1]; m + 1];
        reach[0][0] = true;
        for i in 0..=m {
            for j in 0..=n {
                if !reach[i][j] || i == m {
                    continue;
                }
                match &self.segments[i] {
                    Segment::AnySegments => {
                        reach[i + 1][j] = true; // `**` ends here
                        if j < n {
                            reach[i][j + 1] = true; // `**` takes one more segment
                        }
                    }
                    Segment::Glob(glob) => {
                        if j < n && glob_matches(glob, &path[j]) {
                            reach[i + 1][j + 1] = true;
                        }
                    }
                }
            }
        }
        reach[m][n]
    }

    /// Whether some concrete path (one [`validate_lease_path`] accepts, except for its length
    /// bounds) matches both patterns. Symmetric; a literal pattern overlaps `other` exactly when
    /// `other` covers it.
    ///
    /// Exact, not approximate. The only simplification: the witness path's length is not bounded
    /// by [`MAX_LEASE_PATTERN_CHARS`] or [`MAX_LEASE_SEGMENTS`], so two patterns whose only
    /// common paths are longer than a path may be (e.g. `**/a/…/a` and `b/…/b/**` with 31
    /// fixed segments each) still overlap — the conservative answer for a lease.
    ///
    /// How: a reachability pass over pairs of positions in the two patterns' segment lists, in
    /// which `**` may end or absorb the other side's next segment, and two single-segment globs
    /// advance together when their languages share a valid segment (itself a reachability pass
    /// over pairs of character positions, also tracking whether the common text so far is empty,
    /// `.` or `..`, which are not valid segments). Cost: polynomial, O(length × length) of the
    /// two texts, at most about 512 × 512 × 4 steps.
    pub fn overlaps(&self, other: &LeasePattern) -> bool {
        let (p, q) = (&self.segments, &other.segments);
        let (m, n) = (p.len(), q.len());
        // reach[i][j]: some path matches the first i segments of p and the first j of q. A path
        // with no segment is not a path, but reaching the end with no segment taken means every
        // segment of both is `**`, and then `a` is a common path too.
        let mut reach = vec![vec![false; n + 1]; m + 1];
        reach[0][0] = true;
        for i in 0..=m {
            for j in 0..=n {
                if !reach[i][j] {
                    continue;
                }
                let (ps, qs) = (p.get(i), q.get(j));
                if ps == Some(&Segment::AnySegments) {
                    reach[i + 1][j] = true; // p's `**` ends here
                }
                if qs == Some(&Segment::AnySegments) {
                    reach[i][j + 1] = true; // q's `**` ends here
                }
                match (ps, qs) {
                    // Both `**` take one more segment: no progress, nothing new is reachable.
                    (Some(Segment::AnySegments), Some(Segment::AnySegments)) => {}
                    // p's `**` takes a segment q's glob matches: every valid glob segment matches
                    // some valid segment (its text with each `*` read as `a`).
                    (Some(Segment::AnySegments), Some(Segment::Glob(_))) => {
                        reach[i][j + 1] = true;
                    }
                    (Some(Segment::Glob(_)), Some(Segment::AnySegments)) => {
                        reach[i + 1][j] = true;
                    }
                    (Some(Segment::Glob(a)), Some(Segment::Glob(b))) if globs_overlap(a, b) => {
                        reach[i + 1][j + 1] = true;
                    }
                    _ => {}
                }
            }
        }
        reach[m][n]
    }
}

/// Checks that `path` is a concrete lease path: the [`LeasePattern`] rules (non-empty, at most
/// [`MAX_LEASE_PATTERN_CHARS`] characters and [`MAX_LEASE_SEGMENTS`] segments, no empty, `.` or `..`
/// segment, no `?`, `[`, `]`, `{`, `}`, `\` or control character) and no `*`.
///
/// Errors: [`BusError::Invalid`] naming the broken rule.
pub fn validate_lease_path(path: &str) -> BusResult<()> {
    checked_segments(path, "lease path", false).map(|_| ())
}

/// The segments of `text` once it passes the pattern rules; `*` only when `wildcards`.
fn checked_segments<'a>(text: &'a str, what: &str, wildcards: bool) -> BusResult<Vec<&'a str>> {
    if text.is_empty() {
        return Err(BusError::invalid(format!("{what} is empty")));
    }
    if text.chars().count() > MAX_LEASE_PATTERN_CHARS {
        return Err(BusError::invalid(format!(
            "{what} is longer than {MAX_LEASE_PATTERN_CHARS} characters"
        )));
    }
    if let Some(c) = text
        .chars()
        .find(|c| c.is_control() || REFUSED.contains(c) || (!wildcards && *c == '*'))
    {
        return Err(BusError::invalid(format!(
            "{what} contains the refused character {c:?}"
        )));
    }
    let segments: Vec<&str> = text.split('/').collect();
    if segments.len() > MAX_LEASE_SEGMENTS {
        return Err(BusError::invalid(format!(
            "{what} has more than {MAX_LEASE_SEGMENTS} segments"
        )));
    }
    for seg in &segments {
        if seg.is_empty() {
            return Err(BusError::invalid(format!(
                "{what} has an empty segment (a leading, trailing or doubled `/`)"
            )));
        }
        if *seg == "." || *seg == ".." {
            return Err(BusError::invalid(format!("{what} has a `{seg}` segment")));
        }
        if *seg != "**" && seg.contains("**") {
            return Err(BusError::invalid(format!(
                "{what} has `**` inside the segment `{seg}`: `**` is only a whole segment"
            )));
        }
    }
    Ok(segments)
}

/// Whether the single-segment glob matches `text` (a segment of a concrete path).
fn glob_matches(glob: &[Tok], text: &[char]) -> bool {
    // at[j]: the glob's first i tokens can match text's first j characters (row i rolling).
    let mut at = vec![false; text.len() + 1];
    at[0] = true;
    for tok in glob {
        match tok {
            Tok::Star => {
                for j in 1..=text.len() {
                    at[j] = at[j] || at[j - 1];
                }
            }
            Tok::Char(c) => {
                for j in (1..=text.len()).rev() {
                    at[j] = at[j - 1] && text[j - 1] == *c;
                }
                at[0] = false;
            }
        }
    }
    at[text.len()]
}

/// What a common text read so far says about its validity as a segment: `.` and `..` and the
/// empty text are not segments; anything else (of allowed characters) is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SoFar {
    Empty = 0,
    Dot = 1,
    DotDot = 2,
    Valid = 3,
}

impl SoFar {
    fn then(self, c: char) -> SoFar {
        match (self, c) {
            (SoFar::Empty, '.') => SoFar::Dot,
            (SoFar::Dot, '.') => SoFar::DotDot,
            _ => SoFar::Valid,
        }
    }
}

/// Whether two single-segment globs match a common valid segment.
///
/// The product of the two globs' automata (state: a position in each glob), with the validity of
/// the text read so far ([`SoFar`]) as a third component. Every step keeps or raises all three
/// components and a step that keeps both positions raises the validity, so one pass in
/// lexicographic order sees every state after all states that lead to it. Where both sides are
/// at a `*`, the common character is free: `.` and `a` stand for every allowed character (all
/// others act on validity as `a` does). Literal characters of a valid glob are themselves allowed
/// path characters.
fn globs_overlap(a: &[Tok], b: &[Tok]) -> bool {
    let (m, n) = (a.len(), b.len());
    let idx = |i: usize, j: usize, v: SoFar| (i * (n + 1) + j) * 4 + v as usize;
    let mut reach = vec![false; (m + 1) * (n + 1) * 4];
    reach[idx(0, 0, SoFar::Empty)] = true;
    for i in 0..=m {
        for j in 0..=n {
            for v in [SoFar::Empty, SoFar::Dot, SoFar::DotDot, SoFar::Valid] {
                if !reach[idx(i, j, v)] {
                    continue;
                }
                let (x, y) = (a.get(i), b.get(j));
                if x == Some(&Tok::Star) {
                    reach[idx(i + 1, j, v)] = true; // a's `*` ends here
                }
                if y == Some(&Tok::Star) {
                    reach[idx(i, j + 1, v)] = true; // b's `*` ends here
                }
                match (x, y) {
                    (Some(Tok::Star), Some(Tok::Star)) => {
                        reach[idx(i, j, v.then('.'))] = true;
                        reach[idx(i, j, v.then('a'))] = true;
                    }
                    (Some(Tok::Star), Some(Tok::Char(c))) => {
                        reach[idx(i, j + 1, v.then(*c))] = true;
                    }
                    (Some(Tok::Char(c)), Some(Tok::Star)) => {
                        reach[idx(i + 1, j, v.then(*c))] = true;
                    }
                    (Some(Tok::Char(c)), Some(Tok::Char(d))) if c == d => {
                        reach[idx(i + 1, j + 1, v.then(*c))] = true;
                    }
                    _ => {}
                }
            }
        }
    }
    reach[idx(m, n, SoFar::Valid)]
}

/// How a lease holds its pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseMode {
    /// No other lease on an overlapping pattern, of either mode, may be held at the same time.
    Exclusive,
    /// Other shared leases on overlapping patterns may be held at the same time; no exclusive one.
    Shared,
}

impl LeaseMode {
    /// Whether two leases of these modes on overlapping patterns conflict: when at least one is
    /// exclusive. Symmetric.
    pub fn conflicts_with(self, other: LeaseMode) -> bool {
        self == LeaseMode::Exclusive || other == LeaseMode::Exclusive
    }
}

/// What a lease claims: a pattern in a mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseClaim {
    /// The paths claimed.
    pub pattern: LeasePattern,
    /// How they are held.
    pub mode: LeaseMode,
}

impl LeaseClaim {
    /// Whether the two claims cannot be held at once: their patterns overlap
    /// ([`LeasePattern::overlaps`]) and at least one is exclusive ([`LeaseMode::conflicts_with`]).
    /// Symmetric.
    pub fn conflicts_with(&self, other: &LeaseClaim) -> bool {
        self.mode.conflicts_with(other.mode) && self.pattern.overlaps(&other.pattern)
    }
}

/// The fencing token a grant carries: a number from one counter per team, bumped in the
/// acquire transaction, so a later grant in the team always carries a greater token (ordering by
/// `Ord`). A resource that remembers the greatest token it has accepted refuses a lower one, which
/// shuts out a holder whose lease lapsed while it was paused. Serialises as the bare number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token after this one; `None` once the counter is at `u64::MAX`.
    pub fn next(self) -> Option<FencingToken> {
        self.0.checked_add(1).map(FencingToken)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for LeasePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeasePattern({:?})", self.text)
    }
}

impl fmt::Display for LeasePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for LeasePattern {
    type Err = BusError;
    fn from_str(s: &str) -> BusResult<Self> {
        LeasePattern::parse(s)
    }
}

impl TryFrom<String> for LeasePattern {
    type Error = BusError;
    fn try_from(value: String) -> BusResult<Self> {
        LeasePattern::parse(&value)
    }
}

impl From<LeasePattern> for String {
    fn from(value: LeasePattern) -> Self {
        value.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(s: &str) -> LeasePattern {
        LeasePattern::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn is_invalid(r: BusResult<impl fmt::Debug>) -> bool {
        matches!(r, Err(BusError::Invalid { .. }))
    }

    #[test]
    fn each_malformed_pattern_is_invalid() {
        let long_ascii = "a".repeat(MAX_LEASE_PATTERN_CHARS + 1);
        // 513 characters (1 026 bytes): the bound is in characters.
        let long_utf8 = "é".repeat(MAX_LEASE_PATTERN_CHARS + 1);
        let many_segments = vec!["a"; MAX_LEASE_SEGMENTS + 1].join("/");
        let refused = [
            "",
            "/",
            "/a",
            "a/",
            "a//b",
            ".",
            "..",
            "a/./b",
            "a/../b",
            "./a",
            "a/..",
            "a?",
            "a[b]",
            "[",
            "]",
            "{a,b}",
            "}",
            "a\\*",
            "a**",
            "**b",
            "a/***/b",
            "x/a**b",
            "a\nb",
            "a\tb",
            "a\u{0}",
            "a\u{7f}",
            "a\u{85}",
            long_ascii.as_str(),
            long_utf8.as_str(),
            many_segments.as_str(),
        ];
        for bad in refused {
            assert!(is_invalid(LeasePattern::parse(bad)), "{bad:?}");
            assert!(is_invalid(validate_lease_path(bad)), "{bad:?}");
            assert!(is_invalid(bad.parse::<LeasePattern>()), "{bad:?}");
        }
    }

    #[test]
    fn the_bounds_are_inclusive() {
        let longest = "a".repeat(MAX_LEASE_PATTERN_CHARS);
        assert!(LeasePattern::parse(&longest).is_ok());
        let most = vec!["*"; MAX_LEASE_SEGMENTS].join("/");
        assert!(LeasePattern::parse(&most).is_ok());
        assert!(validate_lease_path(&vec!["a"; MAX_LEASE_SEGMENTS].join("/")).is_ok());
        assert!(validate_lease_path(&"é".repeat(MAX_LEASE_PATTERN_CHARS)).is_ok());
    }

    #[test]
    fn a_path_has_no_wildcard() {
        for bad in ["*", "**", "src/*.rs", "src/**", "a*b"] {
            assert!(is_invalid(validate_lease_path(bad)), "{bad:?}");
            assert!(!pat("**").covers(bad), "{bad:?}");
        }
        for good in [
            "a",
            "src/lease.rs",
            ".git/config",
            "a..b",
            "...",
            "with space",
        ] {
            assert!(validate_lease_path(good).is_ok(), "{good:?}");
            assert!(pat("**").covers(good), "{good:?}");
            assert!(pat(good).is_literal());
        }
    }

    #[test]
    fn covers_examples() {
        let src = pat("src/**");
        assert!(src.covers("src/a.rs"));
        assert!(src.covers("src/a/b/c.rs"));
        assert!(src.covers("src"), "`**` matches zero segments");
        assert!(!src.covers("srcx/a.rs"));
        assert!(!src.covers("lib/src/a.rs"));
        assert!(!pat("Src/**").covers("src/a.rs"), "case-sensitive");
        assert!(pat("*.rs").covers("a.rs"));
        assert!(pat("*.rs").covers(".rs"), "`*` matches the empty text");
        assert!(!pat("*.rs").covers("src/a.rs"), "`*` stays in one segment");
        assert!(pat("**/*.rs").covers("src/a/b.rs"));
        assert!(pat("**/*.rs").covers("b.rs"));
        assert!(pat("a/**/b/**/c").covers("a/b/c"));
        assert!(pat("a/**/b/**/c").covers("a/x/b/y/z/c"));
        assert!(!pat("a/**/b/**/c").covers("a/x/c"));
        assert!(pat("Cargo.toml").covers("Cargo.toml"));
        assert!(!pat("Cargo.toml").covers("Cargo.tomlx"));
        assert!(pat("a*b*c").covers("abc"));
        assert!(pat("a*b*c").covers("axxbyyc"));
        assert!(!pat("a*b*c").covers("acb"));
        assert!(!pat("**").covers(""), "the empty path is not a path");
        assert!(!pat("**").covers("a/../b"));
    }

    #[test]
    fn overlaps_examples() {
        let yes = [
            ("src/**", "src/a.rs"),
            ("a*", "*b"),
            ("**", "a"),
            ("**", "x/y/*.rs"),
            ("**", "**"),
            ("**/**", "**"),
            ("src/**", "**/a.rs"),
            ("src/**", "src"),
            ("a/**", "**/b"),
            ("*", "*"),
            ("*/*", "**"),
            (".*", "*."),
            ("*.*", "a.b"),
            ("a*b*c", "*bc"),
        ];
        for (a, b) in yes {
            assert!(pat(a).overlaps(&pat(b)), "{a} ∩ {b}");
            assert!(pat(b).overlaps(&pat(a)), "{b} ∩ {a}");
        }
        let no = [
            ("src/a/**", "src/b/**"),
            ("*.rs", "*.md"),
            ("src/**", "lib/**"),
            ("*", "a/b"),
            ("*/*", "*"),
            ("a*", "b*"),
            ("*a", "*b"),
            ("a", "A"),
            ("src/*", "src"),
            ("a/**/b", "a"),
        ];
        for (a, b) in no {
            assert!(!pat(a).overlaps(&pat(b)), "{a} ∩ {b}");
            assert!(!pat(b).overlaps(&pat(a)), "{b} ∩ {a}");
        }
    }

    #[test]
    fn common_text_that_is_only_dots_is_no_segment() {
        // `.*` ∩ `*.` holds `.`, which is not a segment, but also `..x.`-like texts: `...`.
        assert!(globs_overlap(&toks(".*"), &toks("*.")));
        // Only `.` and `..` are common: not an overlap.
        assert!(!globs_overlap(&toks("."), &toks("*")));
        assert!(!globs_overlap(&toks(".."), &toks(".*")));
        // `..*` ∩ `*..`: `..` is not a segment, `...` is.
        assert!(globs_overlap(&toks("..*"), &toks("*..")));
        assert!(!globs_overlap(&toks(""), &toks("*")));
    }

    fn toks(s: &str) -> Vec<Tok> {
        s.chars()
            .map(|c| if c == '*' { Tok::Star } else { Tok::Char(c) })
            .collect()
    }

    #[test]
    fn display_and_serde_are_the_text() {
        let p = pat("src/**/*.rs");
        assert_eq!(p.to_string(), "src/**/*.rs");
        assert_eq!(format!("{p:?}"), "LeasePattern(\"src/**/*.rs\")");
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, "\"src/**/*.rs\"");
        assert_eq!(serde_json::from_str::<LeasePattern>(&json).unwrap(), p);
        assert!(serde_json::from_str::<LeasePattern>("\"a//b\"").is_err());
        assert!(serde_json::from_str::<LeasePattern>("\"a?\"").is_err());
    }

    #[test]
    fn modes_and_claims_conflict_when_one_is_exclusive_and_patterns_overlap() {
        use LeaseMode::{Exclusive, Shared};
        assert!(Exclusive.conflicts_with(Shared) && Shared.conflicts_with(Exclusive));
        assert!(Exclusive.conflicts_with(Exclusive));
        assert!(!Shared.conflicts_with(Shared));
        let claim = |p: &str, mode| LeaseClaim {
            pattern: pat(p),
            mode,
        };
        assert!(claim("src/**", Exclusive).conflicts_with(&claim("src/a.rs", Shared)));
        assert!(!claim("src/**", Shared).conflicts_with(&claim("src/a.rs", Shared)));
        assert!(!claim("src/a/**", Exclusive).conflicts_with(&claim("src/b/**", Exclusive)));
        assert_eq!(serde_json::to_string(&Exclusive).unwrap(), "\"exclusive\"");
    }

    #[test]
    fn fencing_tokens_order_and_advance() {
        assert!(FencingToken(2) > FencingToken(1));
        assert_eq!(FencingToken(1).next(), Some(FencingToken(2)));
        assert_eq!(FencingToken(u64::MAX).next(), None);
        assert_eq!(serde_json::to_string(&FencingToken(7)).unwrap(), "7");
    }

    /// Reference glob match of one segment: plain backtracking.
    fn ref_seg(p: &[char], s: &[char]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some(('*', rest)) => (0..=s.len()).any(|k| ref_seg(rest, &s[k..])),
            Some((c, rest)) => s.first() == Some(c) && ref_seg(rest, &s[1..]),
        }
    }

    /// Reference match of a pattern's segments against a path's: plain backtracking.
    fn ref_path(p: &[&str], s: &[&str]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((&"**", rest)) => (0..=s.len()).any(|k| ref_path(rest, &s[k..])),
            Some((g, rest)) => {
                let g: Vec<char> = g.chars().collect();
                !s.is_empty()
                    && ref_seg(&g, &s[0].chars().collect::<Vec<_>>())
                    && ref_path(rest, &s[1..])
            }
        }
    }

    fn ref_covers(p: &str, path: &str) -> bool {
        let p: Vec<&str> = p.split('/').collect();
        let s: Vec<&str> = path.split('/').collect();
        ref_path(&p, &s)
    }

    /// Every path of 1..=k segments, each segment one of `segs`.
    fn paths(segs: &[&str], k: usize) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        let mut last: Vec<String> = vec![String::new()];
        for _ in 0..k {
            last = last
                .iter()
                .flat_map(|p| {
                    segs.iter().map(move |s| {
                        if p.is_empty() {
                            s.to_string()
                        } else {
                            format!("{p}/{s}")
                        }
                    })
                })
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    fn small_pattern() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            proptest::sample::select(vec!["a", "b", "*", "**", "ab", "a*", "*b"]),
            1..=3,
        )
        .prop_map(|segs| segs.join("/"))
    }

    fn small_path() -> impl Strategy<Value = String> {
        proptest::collection::vec("[ab]{1,2}", 1..=4).prop_map(|segs| segs.join("/"))
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The path oracle. Its bound, for patterns of segments from {a, b, *, **, ab, a*, *b}:
        /// take a common path w. (1) A segment of w that both patterns match with a `**` can be
        /// deleted and both still match; so, unless both are all `**` (then `a` is common), some
        /// common path has every segment matched by a non-`**` segment of one side, each of which
        /// matches one segment: at most globs(p) + globs(q) segments (k below). (2) Each segment
        /// can then be replaced by a shortest valid text its one or two globs share: for these
        /// globs that is at most 2 letters of {a, b} (`ab` ∩ x is `ab`; `a*` ∩ `*b` is `ab`;
        /// every other pair or single glob has a one-letter member). So enumerating every path
        /// of ≤ k segments from {a, b, aa, ab, ba, bb} finds a witness iff one exists.
        #[test]
        fn overlaps_agrees_with_brute_force(p in small_pattern(), q in small_pattern()) {
            let globs = |s: &str| s.split('/').filter(|g| *g != "**").count();
            let k = (globs(&p) + globs(&q)).max(1);
            let oracle = paths(&["a", "b", "aa", "ab", "ba", "bb"], k)
                .iter()
                .any(|w| ref_covers(&p, w) && ref_covers(&q, w));
            let (pp, qq) = (pat(&p), pat(&q));
            prop_assert_eq!(pp.overlaps(&qq), oracle, "{} ∩ {}", p, q);
            prop_assert_eq!(qq.overlaps(&pp), oracle, "symmetric: {} ∩ {}", q, p);
        }

        /// The segment oracle, with dots (validity: not `.`, not `..`). Bound: a shortest common
        /// valid text needs at most one character matched by `*` on both sides (the others can be
        /// deleted; the one kept can be `a`, which makes the text valid), and every other
        /// character matches a literal of one side, so at most lits(a) + lits(b) + 1 ≤ 9
        /// characters, all from {., a}.
        #[test]
        fn single_segments_agree_with_brute_force(
            a in "[.a*]{1,4}".prop_filter("valid", |s| LeasePattern::parse(s).is_ok() && s != "**"),
            b in "[.a*]{1,4}".prop_filter("valid", |s| LeasePattern::parse(s).is_ok() && s != "**"),
        ) {
            let texts = paths(&[".", "a"], 9);
            let oracle = texts
                .iter()
                .map(|t| t.replace('/', ""))
                .filter(|t| t != "." && t != "..")
                .any(|t| ref_covers(&a, &t) && ref_covers(&b, &t));
            prop_assert_eq!(pat(&a).overlaps(&pat(&b)), oracle, "{} ∩ {}", a, b);
        }

        #[test]
        fn covers_agrees_with_the_reference(p in small_pattern(), w in small_path()) {
            prop_assert_eq!(pat(&p).covers(&w), ref_covers(&p, &w), "{} covers {}", p, w);
        }

        #[test]
        fn a_literal_overlaps_what_covers_it(p in small_pattern(), w in small_path()) {
            let lit = pat(&w);
            prop_assert!(lit.is_literal());
            let pp = pat(&p);
            prop_assert_eq!(lit.overlaps(&pp), pp.covers(&w));
            prop_assert_eq!(pp.overlaps(&lit), pp.covers(&w));
        }

        #[test]
        fn text_round_trips(p in small_pattern()) {
            let pp = pat(&p);
            prop_assert_eq!(pp.to_string(), p.clone());
            let json = serde_json::to_string(&pp).unwrap();
            prop_assert_eq!(serde_json::from_str::<LeasePattern>(&json).unwrap(), pp);
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            if let Ok(p) = LeasePattern::parse(&s) {
                let _ = p.overlaps(&p);
            }
        }
    }
}

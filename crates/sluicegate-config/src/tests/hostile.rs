//! Hostile and large input: garbage never panics, and big configs load in linear time.

use crate::parse;

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Parses `text`; only a panic (or a hang) fails.
fn survive(text: &str) {
    match crate::parse(text) {
        Ok(_) => {}
        Err(errors) => {
            assert!(!errors.is_empty());
            assert!(errors
                .windows(2)
                .all(|w| (w[0].line, w[0].col) <= (w[1].line, w[1].col)));
            assert!(errors.iter().all(|e| e.line >= 1 && e.col >= 1));
        }
    }
}

#[test]
fn garbage_never_panics() {
    let inputs = [
        "",
        "\0",
        "\u{feff}",
        ":",
        "-",
        "- -",
        "?",
        "? [a]: b",
        "[a]: b",
        "{",
        "}",
        "]]]]",
        "'",
        "\"\\u",
        "&a",
        "*a",
        "&a [*a]",
        "!",
        "!!binary x",
        "%YAML 1.2\n---\n",
        "%TAG ! tag:x\n--- !a b",
        "---\n...\n---\n",
        "listen:",
        "listen: ~",
        "listen: [~, [], {}]",
        "listen: 999.999.999.999:99999",
        "listen: \"[::1]:\"",
        "listen: 127.0.0.1:1\nservices: [[], ~, 1, {name: [], endpoints: {}}]",
        "listen: 127.0.0.1:1\nroutes: [[], ~, 1, {name: {}, match: [], respond: [], service: {}}]",
        "listen: 127.0.0.1:1\nroutes: [{name: r, match: {path_regex: '(((((((((('}, respond: {}}]",
        "listen: 127.0.0.1:1\nroutes: [{name: r, match: {path_regex: 'a{1000}{1000}{1000}'}, respond: {}}]",
        "listen: 127.0.0.1:1\nroutes: [{name: r, match: {host: '*.', methods: ['']}, respond: {status: 99999999999999999999999}}]",
        "listen: 127.0.0.1:1\ntimeouts: {drain: 99999999999999999999999999999999999999999h}",
        "listen: 127.0.0.1:1\nlimits: {max_body_bytes: 99999999999999999999TiB}",
        "listen: 127.0.0.1:1\n\t\tworkers: 1",
        "é: ü\n\u{2028}\u{85}: \r\r\n",
        "a: |\n  x\n b",
        "a: >-\n\n\n",
    ];
    for text in inputs {
        survive(text);
    }
    survive(&"[".repeat(100_000));
    survive(&"{a: ".repeat(10_000));
    survive(&"- ".repeat(100_000));
    survive(&format!(
        "listen: 127.0.0.1:1\nroutes:\n{}",
        "  - ".repeat(50_000)
    ));
}

#[test]
fn random_tokens_never_panic() {
    const TOKENS: &[&str] = &[
        "listen",
        "services",
        "routes",
        "name",
        "endpoints",
        "match",
        "respond",
        "service",
        "path",
        "path_prefix",
        "headers",
        "weight",
        "addr",
        "127.0.0.1:80",
        "a",
        ":",
        ": ",
        "- ",
        "\n",
        "\n  ",
        "  ",
        "[",
        "]",
        "{",
        "}",
        ", ",
        "\"",
        "'",
        "#",
        "&x ",
        "*x",
        "!!str ",
        "?",
        "|",
        ">",
        "---",
        "~",
        "0",
        "1s",
        "true",
        "é",
        "\t",
        "\\",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let mut text = String::new();
        for _ in 0..rng.below(60) {
            text.push_str(TOKENS[rng.below(TOKENS.len())]);
        }
        survive(&text);
    }
}

#[test]
fn mutated_valid_configs_never_panic() {
    let base = include_str!("../../../../examples/quickstart.yaml");
    let chars: Vec<char> = base.chars().collect();
    let extra = ['\n', ' ', ':', '-', '[', '{', '"', '0', 'x', '/', '*', '\t'];
    let mut rng = Rng(42);
    for _ in 0..2000 {
        let mut c = chars.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(c.len());
            match rng.below(3) {
                0 => {
                    c.remove(at);
                }
                1 => c.insert(at, extra[rng.below(extra.len())]),
                _ => c[at] = extra[rng.below(extra.len())],
            }
        }
        survive(&c.into_iter().collect::<String>());
    }
}

/// A config with `n` services and `n` routes, every one valid.
pub(crate) fn big_config(n: usize) -> String {
    let mut text = String::from("listen: 127.0.0.1:8080\nservices:\n");
    for i in 0..n {
        let (a, b) = (i / 250 % 250, i % 250);
        text.push_str(&format!(
            "  - name: s{i}\n    endpoints: [\"127.{a}.{b}.1:80\", {{ addr: \"127.{a}.{b}.2:80\", weight: 2 }}]\n"
        ));
    }
    text.push_str("routes:\n");
    for i in 0..n {
        text.push_str(&format!(
            "  - {{ name: r{i}, match: {{ path_prefix: /p{i}, methods: [GET] }}, service: s{i} }}\n"
        ));
    }
    text
}

#[test]
fn large_configs_parse() {
    let n = 20_000;
    let config = parse(&big_config(n)).unwrap_or_else(|e| panic!("{:?}", &e[..e.len().min(3)]));
    assert_eq!(config.services.len(), n);
    assert_eq!(config.routes.len(), n);

    // Every entry wrong: every error is reported, still in linear time.
    let mut bad = big_config(n).replace("service: s", "service: x");
    bad.push_str("  - { name: r0, respond: {} }\n");
    let errors = parse(&bad).unwrap_err();
    assert_eq!(errors.len(), n + 1);
    assert!(
        errors[n].message.contains("duplicate route name \"r0\""),
        "{}",
        errors[n]
    );
}

//! Sweep filters: small boolean expressions over scenario keys, e.g.
//! `parallel.tp * parallel.pp <= 32 and cluster.gpu != "A100"`.
//!
//! Grammar (usual precedence, lowest first): `or`, `and`, `not`, comparisons
//! (`< <= > >= == !=`), `+ -`, `* / %`, unary `-`, atoms: numbers, `"strings"` or `'strings'`,
//! `true`/`false`, dotted keys (looked up in the point's resolved scenario), parentheses.
//!
//! Limits keep a hostile filter from exhausting the stack: at most [`MAX_DEPTH`] levels of
//! parentheses and unary operators, at most [`MAX_TOKENS`] tokens (so the parsed tree, which
//! is evaluated and dropped recursively, stays shallow). Parsing is linear in the text.
//! Division or remainder by zero is an error, not an infinity or a NaN.

use serde_yaml_ng::Value;

/// A parsed filter expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A number literal.
    Num(f64),
    /// A quoted string literal.
    Str(String),
    /// `true` or `false`.
    Bool(bool),
    /// A resolved scenario key (`parallel.tp`) or `gpus`.
    Key(String),
    /// Unary minus.
    Neg(Box<Expr>),
    /// `!` / `not`.
    Not(Box<Expr>),
    /// A binary operation.
    Bin(Op, Box<Expr>, Box<Expr>),
}

/// A binary operator of a filter expression, loosest-binding first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `||` / `or`.
    Or,
    /// `&&` / `and`.
    And,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
    /// `%`.
    Rem,
}

/// A value during evaluation.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// A number (integers too).
    Num(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ident(String),
    Op(&'static str),
    LParen,
    RParen,
}

/// Most levels of parentheses and unary operators (`-`, `not`) a filter may nest.
pub const MAX_DEPTH: usize = 64;

/// Most tokens in one filter expression.
pub const MAX_TOKENS: usize = 1024;

fn too_deep(at: &str) -> String {
    format!(
        "too deeply nested at {at}: more than {MAX_DEPTH} levels of parentheses or unary operators; \
         flatten the expression or split it into several filters (a list under `filter:`)"
    )
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let mut depth = 0usize;
    let too_long = || format!("too long: more than {MAX_TOKENS} tokens; split it into several filters (a list under `filter:`)");
    while i < b.len() {
        if out.len() > MAX_TOKENS {
            return Err(too_long());
        }
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == '.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let st = i;
            while i < b.len() && ((b[i] as char).is_ascii_digit() || b[i] == b'.' || b[i] == b'e' || b[i] == b'E') {
                i += 1;
            }
            let t = &s[st..i];
            out.push(Tok::Num(t.parse().map_err(|_| format!("bad number {t:?}"))?));
        } else if c == '"' || c == '\'' {
            let st = i + 1;
            i += 1;
            while i < b.len() && b[i] as char != c {
                i += 1;
            }
            if i >= b.len() {
                return Err(format!("unterminated string starting at column {st}"));
            }
            out.push(Tok::Str(s[st..i].to_string()));
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let st = i;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            out.push(Tok::Ident(s[st..i].to_string()));
        } else if c == '(' {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(too_deep(&format!("column {i}")));
            }
            out.push(Tok::LParen);
            i += 1;
        } else if c == ')' {
            depth = depth.saturating_sub(1);
            out.push(Tok::RParen);
            i += 1;
        } else {
            let two = s.get(i..i + 2).unwrap_or("");
            let op = match two {
                "<=" | ">=" | "==" | "!=" | "&&" | "||" => Some(two),
                _ => None,
            };
            if let Some(op) = op {
                out.push(Tok::Op(match op {
                    "<=" => "<=",
                    ">=" => ">=",
                    "==" => "==",
                    "!=" => "!=",
                    "&&" => "and",
                    _ => "or",
                }));
                i += 2;
            } else {
                let op = match c {
                    '<' => "<",
                    '>' => ">",
                    '+' => "+",
                    '-' => "-",
                    '*' => "*",
                    '/' => "/",
                    '%' => "%",
                    '!' => "not",
                    _ => return Err(format!("unexpected character {c:?} at column {i}")),
                };
                out.push(Tok::Op(op));
                i += 1;
            }
        }
    }
    if out.len() > MAX_TOKENS {
        return Err(too_long());
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    /// Open parentheses and unary operators around the current position.
    depth: usize,
}

impl Parser {
    fn peek_op(&self) -> Option<&'static str> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(o)) => Some(o),
            Some(Tok::Ident(w)) if w == "and" => Some("and"),
            Some(Tok::Ident(w)) if w == "or" => Some("or"),
            Some(Tok::Ident(w)) if w == "not" => Some("not"),
            _ => None,
        }
    }

    fn binary(&mut self, ops: &[(&str, Op)], next: fn(&mut Self) -> Result<Expr, String>) -> Result<Expr, String> {
        let mut l = next(self)?;
        while let Some(o) = self.peek_op() {
            let Some((_, op)) = ops.iter().find(|(s, _)| *s == o) else { break };
            self.pos += 1;
            let r = next(self)?;
            l = Expr::Bin(*op, Box::new(l), Box::new(r));
        }
        Ok(l)
    }

    fn or(&mut self) -> Result<Expr, String> {
        self.binary(&[("or", Op::Or)], Self::and)
    }
    fn and(&mut self) -> Result<Expr, String> {
        self.binary(&[("and", Op::And)], Self::not)
    }
    /// Enters one level of nesting (a parenthesis or a unary operator).
    fn nest(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(too_deep(&format!("token {}", self.pos + 1)));
        }
        Ok(())
    }

    fn not(&mut self) -> Result<Expr, String> {
        if self.peek_op() == Some("not") {
            self.pos += 1;
            self.nest()?;
            let e = Expr::Not(Box::new(self.not()?));
            self.depth -= 1;
            return Ok(e);
        }
        self.cmp()
    }
    fn cmp(&mut self) -> Result<Expr, String> {
        let ops = [
            ("<", Op::Lt),
            ("<=", Op::Le),
            (">", Op::Gt),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("!=", Op::Ne),
        ];
        let l = self.sum()?;
        if let Some(o) = self.peek_op()
            && let Some((_, op)) = ops.iter().find(|(s, _)| *s == o)
        {
            self.pos += 1;
            let r = self.sum()?;
            return Ok(Expr::Bin(*op, Box::new(l), Box::new(r)));
        }
        Ok(l)
    }
    fn sum(&mut self) -> Result<Expr, String> {
        self.binary(&[("+", Op::Add), ("-", Op::Sub)], Self::prod)
    }
    fn prod(&mut self) -> Result<Expr, String> {
        self.binary(&[("*", Op::Mul), ("/", Op::Div), ("%", Op::Rem)], Self::unary)
    }
    fn unary(&mut self) -> Result<Expr, String> {
        if self.peek_op() == Some("-") {
            self.pos += 1;
            self.nest()?;
            let e = Expr::Neg(Box::new(self.unary()?));
            self.depth -= 1;
            return Ok(e);
        }
        self.atom()
    }
    fn atom(&mut self) -> Result<Expr, String> {
        let t = self.toks.get(self.pos).cloned().ok_or("expression ends early")?;
        self.pos += 1;
        Ok(match t {
            Tok::Num(n) => Expr::Num(n),
            Tok::Str(s) => Expr::Str(s),
            Tok::Ident(w) if w == "true" => Expr::Bool(true),
            Tok::Ident(w) if w == "false" => Expr::Bool(false),
            Tok::Ident(w) => Expr::Key(w),
            Tok::LParen => {
                self.nest()?;
                let e = self.or()?;
                self.depth -= 1;
                if self.toks.get(self.pos) != Some(&Tok::RParen) {
                    return Err("missing `)`".into());
                }
                self.pos += 1;
                e
            }
            other => return Err(format!("unexpected {other:?}")),
        })
    }
}

/// Parses a filter expression.
///
/// # Errors
/// A message naming what was unexpected, or a filter past [`MAX_DEPTH`] or [`MAX_TOKENS`].
pub fn parse(s: &str) -> Result<Expr, String> {
    let mut p = Parser {
        toks: lex(s)?,
        pos: 0,
        depth: 0,
    };
    let e = p.or()?;
    if p.pos != p.toks.len() {
        return Err(format!("unexpected {:?} after a complete expression", p.toks[p.pos]));
    }
    Ok(e)
}

/// Looks a dotted key up in a YAML tree.
pub fn lookup<'a>(root: &'a Value, key: &str) -> Option<&'a Value> {
    let mut cur = root;
    for k in key.split('.') {
        cur = cur.as_mapping()?.get(Value::String(k.to_string()))?;
    }
    Some(cur)
}

fn to_val(v: &Value, key: &str) -> Result<Val, String> {
    match v {
        Value::Number(n) => n.as_f64().map(Val::Num).ok_or_else(|| format!("{key}: not a number")),
        Value::String(s) => Ok(Val::Str(s.clone())),
        Value::Bool(b) => Ok(Val::Bool(*b)),
        Value::Null => Ok(Val::Str(String::new())),
        _ => Err(format!("{key} is a map or a list; name one of its scalar keys")),
    }
}

impl Expr {
    /// Evaluates against a resolved scenario tree; `extra` supplies derived names (e.g. `gpus`).
    ///
    /// # Errors
    /// An unknown key, or operands of the wrong type.
    pub fn eval(&self, root: &Value, extra: &dyn Fn(&str) -> Option<Val>) -> Result<Val, String> {
        Ok(match self {
            Expr::Num(n) => Val::Num(*n),
            Expr::Str(s) => Val::Str(s.clone()),
            Expr::Bool(b) => Val::Bool(*b),
            Expr::Key(k) => match lookup(root, k) {
                Some(v) => to_val(v, k)?,
                None => extra(k).ok_or_else(|| format!("filter: unknown key `{k}` (dotted scenario keys, e.g. parallel.tp, or `gpus`)"))?,
            },
            Expr::Neg(e) => Val::Num(-num(&e.eval(root, extra)?)?),
            Expr::Not(e) => Val::Bool(!truth(&e.eval(root, extra)?)?),
            Expr::Bin(op, l, r) => {
                let a = l.eval(root, extra)?;
                match op {
                    Op::And if !truth(&a)? => return Ok(Val::Bool(false)),
                    Op::Or if truth(&a)? => return Ok(Val::Bool(true)),
                    _ => {}
                }
                let b = r.eval(root, extra)?;
                match op {
                    Op::And | Op::Or => Val::Bool(truth(&b)?),
                    Op::Eq => Val::Bool(loose_eq(&a, &b)),
                    Op::Ne => Val::Bool(!loose_eq(&a, &b)),
                    Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                        let o = match (&a, &b) {
                            (Val::Str(x), Val::Str(y)) => x.partial_cmp(y),
                            _ => num(&a)?.partial_cmp(&num(&b)?),
                        }
                        .ok_or("comparison with NaN")?;
                        Val::Bool(match op {
                            Op::Lt => o.is_lt(),
                            Op::Le => o.is_le(),
                            Op::Gt => o.is_gt(),
                            _ => o.is_ge(),
                        })
                    }
                    Op::Add => Val::Num(num(&a)? + num(&b)?),
                    Op::Sub => Val::Num(num(&a)? - num(&b)?),
                    Op::Mul => Val::Num(num(&a)? * num(&b)?),
                    Op::Div | Op::Rem => {
                        let (x, y) = (num(&a)?, num(&b)?);
                        if y == 0.0 {
                            let what = if *op == Op::Div { "division" } else { "remainder" };
                            return Err(format!("{what} by zero; guard the divisor, e.g. `d != 0 and x / d < 1`"));
                        }
                        Val::Num(if *op == Op::Div { x / y } else { x % y })
                    }
                }
            }
        })
    }
}

fn loose_eq(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Num(x), Val::Str(s)) | (Val::Str(s), Val::Num(x)) => s.parse::<f64>().is_ok_and(|y| y == *x),
        _ => a == b,
    }
}

fn num(v: &Val) -> Result<f64, String> {
    match v {
        Val::Num(n) => Ok(*n),
        Val::Bool(b) => Ok(f64::from(u8::from(*b))),
        Val::Str(s) => s.parse().map_err(|_| format!("{s:?} is not a number")),
    }
}

/// Truth of a value: a filter's result must be a boolean (or a number, non-zero is true).
///
/// # Errors
/// A string: it is neither true nor false (the message says so).
pub fn truth(v: &Val) -> Result<bool, String> {
    match v {
        Val::Bool(b) => Ok(*b),
        Val::Num(n) => Ok(*n != 0.0),
        Val::Str(s) => Err(format!("{s:?} is not a boolean")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Value {
        serde_yaml_ng::from_str("parallel: { tp: 4, pp: 2 }\ncluster: { gpu: H100, topology: { nic: { bandwidth: 400Gbps } } }\n").unwrap()
    }

    fn ev(s: &str) -> Result<Val, String> {
        parse(s)?.eval(&tree(), &|k| (k == "gpus").then_some(Val::Num(128.0)))
    }

    #[test]
    fn arithmetic_comparisons_and_logic() {
        assert_eq!(ev("parallel.tp * parallel.pp <= 8"), Ok(Val::Bool(true)));
        assert_eq!(ev("parallel.tp * parallel.pp < 8"), Ok(Val::Bool(false)));
        assert_eq!(ev("gpus / (parallel.tp * parallel.pp) == 16"), Ok(Val::Bool(true)));
        assert_eq!(ev("1 + 2 * 3 == 7 and not (2 > 3)"), Ok(Val::Bool(true)));
        assert_eq!(
            ev("cluster.gpu == 'H100' && cluster.topology.nic.bandwidth != \"100Gbps\""),
            Ok(Val::Bool(true))
        );
        assert_eq!(ev("parallel.tp == 2 or parallel.pp == 2"), Ok(Val::Bool(true)));
        assert_eq!(ev("-parallel.tp % 3"), Ok(Val::Num(-1.0)));
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(ev("parallel.tpp > 1").unwrap_err().contains("parallel.tpp"));
        assert!(ev("parallel > 1").unwrap_err().contains("map"));
        assert!(parse("(1 + 2").unwrap_err().contains(")"));
        assert!(parse("1 2").unwrap_err().contains("after"));
        assert!(parse("1 # 2").unwrap_err().contains("'#'"));
    }

    #[test]
    fn division_by_zero_is_an_error() {
        assert!(ev("parallel.tp / 0 < 1").unwrap_err().contains("division by zero"));
        assert!(
            ev("parallel.tp % (parallel.pp - 2) == 0")
                .unwrap_err()
                .contains("remainder by zero")
        );
        assert_eq!(ev("parallel.tp / parallel.pp == 2"), Ok(Val::Bool(true)));
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let n = 10_000;
        let deep = format!("{}1{}", "(".repeat(n), ")".repeat(n));
        assert!(parse(&deep).unwrap_err().contains("too deeply nested"));
        // Unary chains (under the token limit, over the depth limit).
        let negs = format!("{}1", "-".repeat(1000));
        assert!(parse(&negs).unwrap_err().contains("too deeply nested"));
        let nots = format!("{}true", "not ".repeat(1000));
        assert!(parse(&nots).unwrap_err().contains("too deeply nested"));
        assert!(parse(&format!("{}1", "-".repeat(n))).unwrap_err().contains("too long"));
        // A long flat chain is refused by length (its tree would be as deep as it is long).
        let chain = vec!["1"; n].join(" + ");
        assert!(parse(&chain).unwrap_err().contains("too long"));
        // At the limits, it parses and evaluates.
        let ok = format!("{}1{} == 1", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(ev(&ok), Ok(Val::Bool(true)));
        let ok = vec!["1"; MAX_TOKENS / 2 - 2].join(" + ");
        assert!(ev(&ok).is_ok());
    }
}

//! A CEL subset for webhook matchConditions: literals, lists, maps, field selection,
//! indexing, `has()`, `in`, comparisons, `&&`/`||`/`!` (with CEL's commutative error
//! semantics), `?:`, arithmetic, `size()`, string methods and the `exists`/`all`/
//! `exists_one`/`filter`/`map` macros, evaluated over `object`, `oldObject`, `request`.

use serde_json::{Map, Value, json};

#[derive(Debug, Clone, PartialEq)]
pub struct CelError(pub String);

pub struct Vars {
    pub object: Value,
    pub old_object: Value,
    pub request: Value,
    /// `self` (CRD validation rules)
    pub self_value: Option<Value>,
    /// `oldSelf` (CRD transition rules)
    pub old_self: Option<Value>,
    /// Further variables: `params`, `namespaceObject`, `variables` (admission policies).
    pub extra: Vec<(String, Value)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Int(i64),
    Float(f64),
    Str(String),
    P(&'static str),
}

fn lex(s: &str) -> Result<Vec<Tok>, CelError> {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = vec![];
    const PUNCT: &[&str] = &[
        "==", "!=", "<=", ">=", "&&", "||", "(", ")", "[", "]", "{", "}", ".", ",", ":", "?", "!",
        "<", ">", "+", "-", "*", "/", "%",
    ];
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
            continue;
        }
        if ch.is_ascii_alphabetic() || ch == '_' {
            let st = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[st..i].iter().collect()));
            continue;
        }
        if ch.is_ascii_digit() {
            let st = i;
            while i < c.len() && (c[i].is_ascii_digit() || c[i] == '.') {
                i += 1;
            }
            let t: String = c[st..i].iter().collect();
            if i < c.len() && c[i] == 'u' {
                i += 1;
            }
            if t.contains('.') {
                out.push(Tok::Float(
                    t.parse()
                        .map_err(|_| CelError(format!("invalid number {t}")))?,
                ));
            } else {
                out.push(Tok::Int(
                    t.parse()
                        .map_err(|_| CelError(format!("invalid number {t}")))?,
                ));
            }
            continue;
        }
        if ch == '"' || ch == '\'' {
            let q = ch;
            i += 1;
            let mut s = String::new();
            loop {
                if i >= c.len() {
                    return Err(CelError("unterminated string literal".into()));
                }
                let x = c[i];
                if x == q {
                    i += 1;
                    break;
                }
                if x == '\\' && i + 1 < c.len() {
                    i += 1;
                    s.push(match c[i] {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        o => o,
                    });
                } else {
                    s.push(x);
                }
                i += 1;
            }
            out.push(Tok::Str(s));
            continue;
        }
        let rest: String = c[i..(i + 2).min(c.len())].iter().collect();
        let p = PUNCT
            .iter()
            .find(|p| rest.starts_with(**p))
            .ok_or_else(|| CelError(format!("Syntax error: token recognition error at: '{ch}'")))?;
        out.push(Tok::P(p));
        i += p.chars().count();
    }
    Ok(out)
}

#[derive(Debug, Clone)]
pub enum Expr {
    Lit(Value),
    Ident(String),
    Select(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Call(Option<Box<Expr>>, String, Vec<Expr>),
    List(Vec<Expr>),
    MapLit(Vec<(Expr, Expr)>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Bin(&'static str, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

struct Parser {
    t: Vec<Tok>,
    i: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }
    fn is_p(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::P(x)) if *x == p)
    }
    fn eat(&mut self, p: &str) -> bool {
        if self.is_p(p) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, p: &str) -> Result<(), CelError> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(CelError(format!(
                "Syntax error: missing '{p}' at {}",
                self.peek()
                    .map(|t| format!("{t:?}"))
                    .unwrap_or("<EOF>".into())
            )))
        }
    }
    fn expr(&mut self) -> Result<Expr, CelError> {
        let c = self.or()?;
        if self.eat("?") {
            let a = self.expr()?;
            self.expect(":")?;
            let b = self.expr()?;
            return Ok(Expr::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }
    fn or(&mut self) -> Result<Expr, CelError> {
        self.logical("||", Self::and)
    }
    fn and(&mut self) -> Result<Expr, CelError> {
        self.logical("&&", Self::rel)
    }
    /// A left-associative chain of `op` over operands parsed by `operand`.
    fn logical(
        &mut self,
        op: &'static str,
        operand: fn(&mut Self) -> Result<Expr, CelError>,
    ) -> Result<Expr, CelError> {
        let mut l = operand(self)?;
        while self.eat(op) {
            let r = operand(self)?;
            l = Expr::Bin(op, Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn rel(&mut self) -> Result<Expr, CelError> {
        let mut l = self.add()?;
        loop {
            let op = match self.peek() {
                Some(Tok::P(p)) if ["==", "!=", "<", "<=", ">", ">="].contains(p) => *p,
                Some(Tok::Ident(x)) if x == "in" => "in",
                _ => break,
            };
            self.i += 1;
            let r = self.add()?;
            l = Expr::Bin(op, Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn add(&mut self) -> Result<Expr, CelError> {
        self.binary(&["+", "-"], Self::mul)
    }
    fn mul(&mut self) -> Result<Expr, CelError> {
        self.binary(&["*", "/", "%"], Self::unary)
    }
    /// A left-associative chain of `next` operands joined by any of `ops`.
    fn binary(
        &mut self,
        ops: &[&'static str],
        next: fn(&mut Self) -> Result<Expr, CelError>,
    ) -> Result<Expr, CelError> {
        let mut l = next(self)?;
        while let Some(op) = ops.iter().copied().find(|op| self.is_p(op)) {
            self.i += 1;
            let r = next(self)?;
            l = Expr::Bin(op, Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn unary(&mut self) -> Result<Expr, CelError> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        self.member()
    }
    fn args(&mut self, close: &str) -> Result<Vec<Expr>, CelError> {
        let mut a = vec![];
        if self.eat(close) {
            return Ok(a);
        }
        loop {
            a.push(self.expr()?);
            if self.eat(close) {
                return Ok(a);
            }
            self.expect(",")?;
        }
    }
    fn member(&mut self) -> Result<Expr, CelError> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                let Some(Tok::Ident(f)) = self.peek().cloned() else {
                    return Err(CelError("Syntax error: expected field name".into()));
                };
                self.i += 1;
                if self.eat("(") {
                    let a = self.args(")")?;
                    e = Expr::Call(Some(Box::new(e)), f, a);
                } else {
                    e = Expr::Select(Box::new(e), f);
                }
            } else if self.eat("[") {
                let idx = self.expr()?;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(idx));
            } else {
                return Ok(e);
            }
        }
    }
    fn primary(&mut self) -> Result<Expr, CelError> {
        let t = self
            .peek()
            .cloned()
            .ok_or_else(|| CelError("Syntax error: unexpected end of expression".into()))?;
        self.i += 1;
        match t {
            Tok::Int(n) => Ok(Expr::Lit(json!(n))),
            Tok::Float(f) => Ok(Expr::Lit(json!(f))),
            Tok::Str(s) => Ok(Expr::Lit(Value::String(s))),
            Tok::Ident(id) => match id.as_str() {
                "true" => Ok(Expr::Lit(json!(true))),
                "false" => Ok(Expr::Lit(json!(false))),
                "null" => Ok(Expr::Lit(Value::Null)),
                _ => {
                    if self.eat("(") {
                        let a = self.args(")")?;
                        if id == "has" && !matches!(a.as_slice(), [Expr::Select(..)]) {
                            return Err(CelError("invalid argument to has() macro".into()));
                        }
                        Ok(Expr::Call(None, id, a))
                    } else {
                        Ok(Expr::Ident(id))
                    }
                }
            },
            Tok::P("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::P("[") => Ok(Expr::List(self.args("]")?)),
            Tok::P("{") => {
                let mut entries = vec![];
                if !self.eat("}") {
                    loop {
                        let k = self.expr()?;
                        self.expect(":")?;
                        let v = self.expr()?;
                        entries.push((k, v));
                        if self.eat("}") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(Expr::MapLit(entries))
            }
            Tok::P(p) => Err(CelError(format!("Syntax error: mismatched input '{p}'"))),
        }
    }
}

pub fn parse(expr: &str) -> Result<Expr, CelError> {
    if expr.len() > 16 * 1024 {
        return Err(CelError("expression too long".into()));
    }
    let mut depth = 0i32;
    for c in expr.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if depth > 64 {
            return Err(CelError("expression nested too deeply".into()));
        }
    }
    let t = lex(expr)?;
    let mut p = Parser { t, i: 0 };
    let e = p.expr()?;
    if p.i != p.t.len() {
        return Err(CelError(format!(
            "Syntax error: extraneous input at position {}",
            p.i
        )));
    }
    check_idents(&e, &mut vec![])?;
    Ok(e)
}

fn check_idents(e: &Expr, bound: &mut Vec<String>) -> Result<(), CelError> {
    match e {
        Expr::Ident(id) => {
            if [
                "object",
                "oldObject",
                "request",
                "params",
                "authorizer",
                "namespaceObject",
                "self",
                "oldSelf",
                "variables",
            ]
            .contains(&id.as_str())
                || bound.contains(id)
            {
                Ok(())
            } else {
                Err(CelError(format!(
                    "undeclared reference to '{id}' (in container '')"
                )))
            }
        }
        Expr::Lit(_) => Ok(()),
        Expr::Select(a, _) | Expr::Not(a) | Expr::Neg(a) => check_idents(a, bound),
        Expr::Index(a, b) | Expr::Bin(_, a, b) => {
            check_idents(a, bound)?;
            check_idents(b, bound)
        }
        Expr::Cond(a, b, c) => {
            check_idents(a, bound)?;
            check_idents(b, bound)?;
            check_idents(c, bound)
        }
        Expr::List(xs) => xs.iter().try_for_each(|x| check_idents(x, bound)),
        Expr::MapLit(xs) => xs.iter().try_for_each(|(k, v)| {
            check_idents(k, bound)?;
            check_idents(v, bound)
        }),
        Expr::Call(t, name, args) => {
            if let Some(t) = t {
                check_idents(t, bound)?;
            }
            if t.is_some()
                && matches!(
                    name.as_str(),
                    "exists" | "all" | "exists_one" | "filter" | "map"
                )
                && args.len() == 2
                && let Expr::Ident(v) = &args[0]
            {
                bound.push(v.clone());
                let r = check_idents(&args[1], bound);
                bound.pop();
                return r;
            }
            args.iter().try_for_each(|a| check_idents(a, bound))
        }
    }
}

type R = Result<Value, CelError>;

fn no_such_key(k: &str) -> CelError {
    CelError(format!("no such key: {k}"))
}

fn no_overload(op: &str) -> CelError {
    CelError(format!("no such overload: {op}"))
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn cel_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

struct Env<'a> {
    vars: &'a Vars,
    locals: Vec<(String, Value)>,
}

impl Env<'_> {
    fn lookup(&self, id: &str) -> R {
        if let Some((_, v)) = self.locals.iter().rev().find(|(n, _)| n == id) {
            return Ok(v.clone());
        }
        if let Some((_, v)) = self.vars.extra.iter().find(|(n, _)| n == id) {
            return Ok(v.clone());
        }
        match id {
            "object" => Ok(self.vars.object.clone()),
            "oldObject" => Ok(self.vars.old_object.clone()),
            "request" => Ok(self.vars.request.clone()),
            "params" | "namespaceObject" => Ok(Value::Null),
            "self" => Ok(self.vars.self_value.clone().unwrap_or(Value::Null)),
            "oldSelf" => Ok(self.vars.old_self.clone().unwrap_or(Value::Null)),
            _ => Err(CelError(format!("undeclared reference to '{id}'"))),
        }
    }

    fn eval(&mut self, e: &Expr) -> R {
        match e {
            Expr::Lit(v) => Ok(v.clone()),
            Expr::Ident(id) => self.lookup(id),
            Expr::Select(t, f) => {
                let v = self.eval(t)?;
                let f = crate::schema::unescape_field(f);
                match v {
                    Value::Object(m) => m.get(&f).cloned().ok_or_else(|| no_such_key(&f)),
                    _ => Err(no_such_key(&f)),
                }
            }
            Expr::Index(t, i) => {
                let v = self.eval(t)?;
                let i = self.eval(i)?;
                match (&v, &i) {
                    (Value::Object(m), Value::String(k)) => {
                        m.get(k).cloned().ok_or_else(|| no_such_key(k))
                    }
                    (Value::Array(a), Value::Number(n)) => {
                        let idx = n.as_i64().unwrap_or(-1);
                        if idx < 0 || idx as usize >= a.len() {
                            Err(CelError(format!("index out of bounds: {idx}")))
                        } else {
                            Ok(a[idx as usize].clone())
                        }
                    }
                    (Value::Object(_), k) => Err(no_such_key(&k.to_string())),
                    _ => Err(no_overload("_[_]")),
                }
            }
            Expr::List(xs) => Ok(Value::Array(
                xs.iter().map(|x| self.eval(x)).collect::<Result<_, _>>()?,
            )),
            Expr::MapLit(xs) => {
                let mut m = Map::new();
                for (k, v) in xs {
                    let k = self.eval(k)?;
                    let k = match k {
                        Value::String(s) => s,
                        o => o.to_string(),
                    };
                    m.insert(k, self.eval(v)?);
                }
                Ok(Value::Object(m))
            }
            Expr::Not(a) => match self.eval(a)? {
                Value::Bool(b) => Ok(Value::Bool(!b)),
                _ => Err(no_overload("!_")),
            },
            Expr::Neg(a) => match self.eval(a)? {
                Value::Number(n) => {
                    if let Some(i) = n.as_i64() {
                        Ok(json!(-i))
                    } else {
                        Ok(json!(-n.as_f64().unwrap_or(0.0)))
                    }
                }
                _ => Err(no_overload("-_")),
            },
            Expr::Cond(c, a, b) => match self.eval(c)? {
                Value::Bool(true) => self.eval(a),
                Value::Bool(false) => self.eval(b),
                _ => Err(no_overload("_?_:_")),
            },
            Expr::Bin(op, a, b) => self.bin(op, a, b),
            Expr::Call(target, name, args) => self.call(target.as_deref(), name, args),
        }
    }

    fn bin(&mut self, op: &str, a: &Expr, b: &Expr) -> R {
        if op == "&&" || op == "||" {
            let short = op == "||";
            let l = self.eval(a);
            if let Ok(Value::Bool(x)) = l
                && x == short
            {
                return Ok(Value::Bool(short));
            }
            let r = self.eval(b);
            if let Ok(Value::Bool(x)) = r
                && x == short
            {
                return Ok(Value::Bool(short));
            }
            return match (l, r) {
                (Ok(Value::Bool(_)), Ok(Value::Bool(_))) => Ok(Value::Bool(!short)),
                (Err(e), _) | (_, Err(e)) => Err(e),
                _ => Err(no_overload(if short { "_||_" } else { "_&&_" })),
            };
        }
        let l = self.eval(a)?;
        let r = self.eval(b)?;
        match op {
            "==" => Ok(Value::Bool(cel_eq(&l, &r))),
            "!=" => Ok(Value::Bool(!cel_eq(&l, &r))),
            "in" => match &r {
                Value::Array(xs) => Ok(Value::Bool(xs.iter().any(|x| cel_eq(x, &l)))),
                Value::Object(m) => match &l {
                    Value::String(k) => Ok(Value::Bool(m.contains_key(k))),
                    _ => Ok(Value::Bool(false)),
                },
                _ => Err(no_overload("@in")),
            },
            "<" | "<=" | ">" | ">=" => {
                let ord = match (&l, &r) {
                    (Value::String(x), Value::String(y)) => x.cmp(y),
                    (Value::Number(_), Value::Number(_)) => num(&l)
                        .zip(num(&r))
                        .and_then(|(x, y)| x.partial_cmp(&y))
                        .ok_or_else(|| no_overload(op))?,
                    (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
                    _ => return Err(no_overload(op)),
                };
                use std::cmp::Ordering::*;
                Ok(Value::Bool(match op {
                    "<" => ord == Less,
                    "<=" => ord != Greater,
                    ">" => ord == Greater,
                    _ => ord != Less,
                }))
            }
            "+" => match (&l, &r) {
                (Value::String(x), Value::String(y)) => Ok(Value::String(format!("{x}{y}"))),
                (Value::Array(x), Value::Array(y)) => {
                    Ok(Value::Array(x.iter().chain(y.iter()).cloned().collect()))
                }
                (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
                    (Some(a), Some(b)) => Ok(json!(a.wrapping_add(b))),
                    _ => Ok(json!(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0))),
                },
                _ => Err(no_overload("_+_")),
            },
            "-" | "*" | "/" | "%" => match (&l, &r) {
                (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
                    (Some(a), Some(b)) => match op {
                        "-" => Ok(json!(a.wrapping_sub(b))),
                        "*" => Ok(json!(a.wrapping_mul(b))),
                        _ if b == 0 => Err(CelError(if op == "/" {
                            "division by zero".into()
                        } else {
                            "modulus by zero".into()
                        })),
                        "/" => Ok(json!(a / b)),
                        _ => Ok(json!(a % b)),
                    },
                    _ => {
                        let (a, b) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                        Ok(json!(match op {
                            "-" => a - b,
                            "*" => a * b,
                            "/" => a / b,
                            _ => a % b,
                        }))
                    }
                },
                _ => Err(no_overload(op)),
            },
            _ => Err(no_overload(op)),
        }
    }

    fn call(&mut self, target: Option<&Expr>, name: &str, args: &[Expr]) -> R {
        if target.is_none() && name == "has" {
            let Some(Expr::Select(t, f)) = args.first() else {
                return Err(CelError("invalid argument to has() macro".into()));
            };
            let f = crate::schema::unescape_field(f);
            return match self.eval(t)? {
                Value::Object(m) => Ok(Value::Bool(m.contains_key(&f))),
                _ => Err(no_such_key(&f)),
            };
        }
        if let Some(t) = target
            && matches!(name, "exists" | "all" | "exists_one" | "filter" | "map")
        {
            let coll = self.eval(t)?;
            let items: Vec<Value> = match coll {
                Value::Array(a) => a,
                Value::Object(m) => m.keys().map(|k| Value::String(k.clone())).collect(),
                _ => return Err(no_overload(name)),
            };
            let (Some(Expr::Ident(var)), Some(body)) = (args.first(), args.get(1)) else {
                return Err(CelError(format!(
                    "{name}() requires a variable and an expression"
                )));
            };
            let mut results = vec![];
            let mut err = None;
            for it in items {
                self.locals.push((var.clone(), it.clone()));
                let r = self.eval(body);
                self.locals.pop();
                match r {
                    Ok(v) => results.push((it, v)),
                    Err(e) => err = Some(e),
                }
            }
            let truthy = |v: &Value| v == &Value::Bool(true);
            return match name {
                "exists" => {
                    if results.iter().any(|(_, v)| truthy(v)) {
                        Ok(json!(true))
                    } else if let Some(e) = err {
                        Err(e)
                    } else {
                        Ok(json!(false))
                    }
                }
                "all" => {
                    if results.iter().any(|(_, v)| v == &Value::Bool(false)) {
                        Ok(json!(false))
                    } else if let Some(e) = err {
                        Err(e)
                    } else {
                        Ok(json!(true))
                    }
                }
                _ if err.is_some() => Err(err.unwrap_or(CelError(String::new()))),
                "exists_one" => Ok(json!(
                    results.iter().filter(|(_, v)| truthy(v)).count() == 1
                )),
                "filter" => Ok(Value::Array(
                    results
                        .into_iter()
                        .filter(|(_, v)| truthy(v))
                        .map(|(i, _)| i)
                        .collect(),
                )),
                _ => Ok(Value::Array(results.into_iter().map(|(_, v)| v).collect())),
            };
        }
        let mut vals = vec![];
        if let Some(t) = target {
            vals.push(self.eval(t)?);
        }
        for a in args {
            vals.push(self.eval(a)?);
        }
        let s = |i: usize| vals.get(i).and_then(|v| v.as_str()).map(str::to_string);
        match (name, vals.len()) {
            ("size", 1) => match &vals[0] {
                Value::String(x) => Ok(json!(x.chars().count())),
                Value::Array(x) => Ok(json!(x.len())),
                Value::Object(x) => Ok(json!(x.len())),
                _ => Err(no_overload("size")),
            },
            ("startsWith", 2) => match (s(0), s(1)) {
                (Some(a), Some(b)) => Ok(json!(a.starts_with(&b))),
                _ => Err(no_overload(name)),
            },
            ("endsWith", 2) => match (s(0), s(1)) {
                (Some(a), Some(b)) => Ok(json!(a.ends_with(&b))),
                _ => Err(no_overload(name)),
            },
            ("contains", 2) => match (s(0), s(1)) {
                (Some(a), Some(b)) => Ok(json!(a.contains(&b))),
                _ => Err(no_overload(name)),
            },
            ("lowerAscii", 1) => s(0)
                .map(|a| json!(a.to_ascii_lowercase()))
                .ok_or_else(|| no_overload(name)),
            ("upperAscii", 1) => s(0)
                .map(|a| json!(a.to_ascii_uppercase()))
                .ok_or_else(|| no_overload(name)),
            ("string", 1) => Ok(json!(match &vals[0] {
                Value::String(x) => x.clone(),
                o => o.to_string(),
            })),
            ("int", 1) => match &vals[0] {
                Value::Number(n) => Ok(json!(n.as_f64().unwrap_or(0.0) as i64)),
                Value::String(x) => x
                    .parse::<i64>()
                    .map(|n| json!(n))
                    .map_err(|_| CelError(format!("cannot convert {x:?} to int"))),
                _ => Err(no_overload("int")),
            },
            ("matches", 2) => match (s(0), s(1)) {
                (Some(a), Some(re)) => crate::schema::cached_regex(&re)
                    .map(|r| json!(r.is_match(&a)))
                    .ok_or_else(|| CelError(format!("invalid regex: {re}"))),
                _ => Err(no_overload(name)),
            },
            ("trim", 1) => s(0)
                .map(|a| json!(a.trim()))
                .ok_or_else(|| no_overload(name)),
            ("split", 2) => match (s(0), s(1)) {
                (Some(a), Some(sep)) => Ok(json!(a.split(sep.as_str()).collect::<Vec<_>>())),
                _ => Err(no_overload(name)),
            },
            ("join", 1 | 2) => {
                let sep = s(1).unwrap_or_default();
                match vals[0].as_array() {
                    Some(items) => Ok(json!(
                        items
                            .iter()
                            .map(|x| x.as_str().unwrap_or("").to_string())
                            .collect::<Vec<_>>()
                            .join(&sep)
                    )),
                    None => Err(no_overload(name)),
                }
            }
            ("replace", 3) => match (s(0), s(1), s(2)) {
                (Some(a), Some(from), Some(to)) => Ok(json!(a.replace(&from, &to))),
                _ => Err(no_overload(name)),
            },
            ("indexOf", 2) | ("lastIndexOf", 2) => match (&vals[0], &vals[1]) {
                (Value::String(a), Value::String(b)) => {
                    let pos = if name == "indexOf" {
                        a.find(b.as_str())
                    } else {
                        a.rfind(b.as_str())
                    };
                    Ok(json!(
                        pos.map(|p| a[..p].chars().count() as i64).unwrap_or(-1)
                    ))
                }
                (Value::Array(a), x) => {
                    let pos = if name == "indexOf" {
                        a.iter().position(|y| cel_eq(y, x))
                    } else {
                        a.iter().rposition(|y| cel_eq(y, x))
                    };
                    Ok(json!(pos.map(|p| p as i64).unwrap_or(-1)))
                }
                _ => Err(no_overload(name)),
            },
            ("substring", 2 | 3) => {
                let chars: Vec<char> = s(0).ok_or_else(|| no_overload(name))?.chars().collect();
                let start = vals[1].as_i64().unwrap_or(0).max(0) as usize;
                let end = vals
                    .get(2)
                    .and_then(|v| v.as_i64())
                    .map(|e| e.max(0) as usize)
                    .unwrap_or(chars.len());
                if start > end || end > chars.len() {
                    return Err(CelError(format!("index out of range: {end}")));
                }
                Ok(json!(chars[start..end].iter().collect::<String>()))
            }
            ("charAt", 2) => {
                let chars: Vec<char> = s(0).ok_or_else(|| no_overload(name))?.chars().collect();
                let i = vals[1].as_i64().unwrap_or(-1);
                if i < 0 || i as usize > chars.len() {
                    return Err(CelError(format!("index out of range: {i}")));
                }
                Ok(json!(
                    chars
                        .get(i as usize)
                        .map(|c| c.to_string())
                        .unwrap_or_default()
                ))
            }
            ("sum", 1) | ("min", 1) | ("max", 1) => {
                let nums: Vec<f64> = vals[0]
                    .as_array()
                    .ok_or_else(|| no_overload(name))?
                    .iter()
                    .filter_map(|x| x.as_f64())
                    .collect();
                let ints = vals[0]
                    .as_array()
                    .is_some_and(|a| a.iter().all(|x| x.is_i64()));
                let r = match name {
                    "sum" => Some(nums.iter().sum::<f64>()),
                    "min" => nums.iter().cloned().reduce(f64::min),
                    _ => nums.iter().cloned().reduce(f64::max),
                };
                match r {
                    Some(x) if ints => Ok(json!(x as i64)),
                    Some(x) => Ok(json!(x)),
                    None => Err(CelError(format!("{name} called on an empty list"))),
                }
            }
            ("isSorted", 1) => match vals[0].as_array() {
                Some(a) => Ok(json!(a.windows(2).all(|w| match (&w[0], &w[1]) {
                    (Value::String(x), Value::String(y)) => x <= y,
                    (x, y) => x.as_f64().zip(y.as_f64()).is_some_and(|(x, y)| x <= y),
                }))),
                None => Err(no_overload(name)),
            },
            ("dyn", 1) => Ok(vals[0].clone()),
            ("double", 1) => match &vals[0] {
                Value::Number(n) => Ok(json!(n.as_f64().unwrap_or(0.0))),
                Value::String(x) => x
                    .parse::<f64>()
                    .map(|f| json!(f))
                    .map_err(|_| CelError(format!("cannot convert {x:?} to double"))),
                _ => Err(no_overload(name)),
            },
            ("bool", 1) => match &vals[0] {
                Value::Bool(b) => Ok(json!(b)),
                Value::String(x) if x == "true" => Ok(json!(true)),
                Value::String(x) if x == "false" => Ok(json!(false)),
                _ => Err(no_overload(name)),
            },
            _ => Err(CelError(format!("found no matching overload for '{name}'"))),
        }
    }
}

pub fn eval_bool(expr: &str, vars: &Vars) -> Result<bool, CelError> {
    let e = parse(expr)?;
    let mut env = Env {
        vars,
        locals: vec![],
    };
    match env.eval(&e)? {
        Value::Bool(b) => Ok(b),
        other => Err(CelError(format!(
            "expression must evaluate to bool, got {}",
            match other {
                Value::Null => "null_type",
                Value::String(_) => "string",
                Value::Number(_) => "int",
                Value::Array(_) => "list",
                Value::Object(_) => "map",
                Value::Bool(_) => "bool",
            }
        ))),
    }
}

/// Evaluates an expression to a value (admission policy variables, messageExpression).
pub fn eval_value(expr: &str, vars: &Vars) -> Result<Value, CelError> {
    let e = parse(expr)?;
    let mut env = Env {
        vars,
        locals: vec![],
    };
    env.eval(&e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars {
            object: json!({"metadata": {"name": "x", "labels": {"a": "b", "holdfast.dev/protected": "true"}}}),
            old_object: Value::Null,
            request: json!({"operation": "CREATE", "userInfo": {"username": "admin", "groups": ["system:masters"]}}),
            self_value: None,
            old_self: None,
            extra: vec![],
        }
    }

    #[test]
    fn basics() {
        let v = vars();
        assert_eq!(eval_bool("has(object.metadata.labels)", &v), Ok(true));
        assert_eq!(eval_bool("has(object.metadata.annotations)", &v), Ok(false));
        assert_eq!(
            eval_bool("has(oldObject.metadata.labels)", &v),
            Err(CelError("no such key: metadata".into()))
        );
        assert_eq!(
            eval_bool("oldObject != null && has(oldObject.metadata.labels)", &v),
            Ok(false)
        );
        assert_eq!(
            eval_bool(
                "object.metadata.labels['holdfast.dev/protected'] == 'true'",
                &v
            ),
            Ok(true)
        );
        assert_eq!(eval_bool("'a' in object.metadata.labels", &v), Ok(true));
        assert_eq!(
            eval_bool("request.operation in ['DELETE', 'UPDATE']", &v),
            Ok(false)
        );
        assert_eq!(
            eval_bool("!(request.operation == 'CREATE') || true", &v),
            Ok(true)
        );
        assert_eq!(
            eval_bool("'system:masters' in request.userInfo.groups", &v),
            Ok(true)
        );
        assert_eq!(
            eval_bool(
                "object.metadata.labels.exists(k, k.startsWith('holdfast.dev/'))",
                &v
            ),
            Ok(true)
        );
        assert_eq!(eval_bool("size(object.metadata.labels) == 2", &v), Ok(true));
        assert!(eval_bool("object.metadata.nope == 'x'", &v).is_err());
        assert_eq!(
            eval_bool("false && object.metadata.nope == 'x'", &v),
            Ok(false)
        );
        assert!(parse("foo == 1").is_err());
        assert_eq!(
            eval_bool("'a,b'.split(',').join('-') == 'a-b'", &v),
            Ok(true)
        );
        assert_eq!(
            eval_bool(
                "'holdfast.dev/x'.indexOf('/') == 12 && 'abc'.substring(1) == 'bc'",
                &v
            ),
            Ok(true)
        );
        assert_eq!(
            eval_bool(
                "[3, 1, 2].max() == 3 && [1, 2].sum() == 3 && [1, 2].isSorted()",
                &v
            ),
            Ok(true)
        );
        assert_eq!(
            eval_bool("object.metadata.name.matches('^[a-z]+$')", &v),
            Ok(true)
        );
    }
}

package leasetest

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// This file is Mem's evaluator of DynamoDB expressions, for the subset
// package lease writes (and a little more):
//
//	condition  = or
//	or         = and { "OR" and }
//	and        = unary { "AND" unary }
//	unary      = "NOT" unary | "(" condition ")" | fn "(" path ")"
//	           | "begins_with" "(" path "," operand ")" | operand cmp operand
//	fn         = "attribute_exists" | "attribute_not_exists"
//	cmp        = "=" | "<>" | "<" | "<=" | ">" | ">="
//	update     = clause { clause }
//	clause     = "SET" path "=" operand { "," path "=" operand } | "REMOVE" path { "," path }
//	operand    = path | ":value"
//	path       = "#name" | name     (top-level attributes only)
//
// Keywords are case-insensitive, as in DynamoDB. Anything else is refused
// with a ValidationException, as are placeholders that are used but not
// defined, or defined but not used.

type token struct {
	kind byte // 'i' identifier or keyword, '#' name placeholder, ':' value placeholder, 'p' punctuation
	text string
}

func tokenize(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || c == ':' || isNameChar(c):
			j := i + 1
			for j < len(s) && isNameChar(s[j]) {
				j++
			}
			kind := byte('i')
			if c == '#' || c == ':' {
				kind = c
				if j == i+1 {
					return nil, fmt.Errorf("empty placeholder at offset %d", i)
				}
			}
			out = append(out, token{kind, s[i:j]})
			i = j
		case c == '(' || c == ')' || c == ',' || c == '=':
			out = append(out, token{'p', string(c)})
			i++
		case c == '<' || c == '>':
			j := i + 1
			if j < len(s) && (s[j] == '=' || c == '<' && s[j] == '>') {
				j++
			}
			out = append(out, token{'p', s[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
		}
	}
	return out, nil
}

// exprEnv resolves placeholders and records which were used.
type exprEnv struct {
	names     map[string]string
	values    map[string]types.AttributeValue
	usedNames map[string]bool
	usedVals  map[string]bool
}

func (e *exprEnv) path(t token) (string, error) {
	switch t.kind {
	case '#':
		n, ok := e.names[t.text]
		if !ok {
			return "", fmt.Errorf("expression attribute name %s is not defined", t.text)
		}
		e.usedNames[t.text] = true
		return n, nil
	case 'i':
		if isKeyword(t.text) {
			return "", fmt.Errorf("unexpected keyword %s where an attribute was expected", t.text)
		}
		return t.text, nil
	}
	return "", fmt.Errorf("unexpected %q where an attribute was expected", t.text)
}

func (e *exprEnv) value(t token) (types.AttributeValue, error) {
	v, ok := e.values[t.text]
	if !ok {
		return nil, fmt.Errorf("expression attribute value %s is not defined", t.text)
	}
	e.usedVals[t.text] = true
	return v, nil
}

// unused reports placeholders defined but not used, which DynamoDB refuses.
func (e *exprEnv) unused() error {
	for n := range e.names {
		if !e.usedNames[n] {
			return fmt.Errorf("expression attribute name %s is unused in expressions", n)
		}
	}
	for v := range e.values {
		if !e.usedVals[v] {
			return fmt.Errorf("expression attribute value %s is unused in expressions", v)
		}
	}
	return nil
}

func isKeyword(s string) bool {
	switch strings.ToUpper(s) {
	case "AND", "OR", "NOT", "SET", "REMOVE", "ADD", "DELETE":
		return true
	}
	return false
}

// operand is a resolved path or value.
type operand struct {
	path  string
	value types.AttributeValue // set for a value placeholder
}

func (o operand) eval(it map[string]types.AttributeValue) (types.AttributeValue, bool) {
	if o.value != nil {
		return o.value, true
	}
	v, ok := it[o.path]
	return v, ok
}

// condFn is a parsed condition.
type condFn func(it map[string]types.AttributeValue) bool

type parser struct {
	toks []token
	pos  int
	env  *exprEnv
}

func (p *parser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *parser) next() (token, error) {
	t, ok := p.peek()
	if !ok {
		return token{}, fmt.Errorf("unexpected end of expression")
	}
	p.pos++
	return t, nil
}

func (p *parser) keyword(k string) bool {
	if t, ok := p.peek(); ok && t.kind == 'i' && strings.EqualFold(t.text, k) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) punct(s string) bool {
	if t, ok := p.peek(); ok && t.kind == 'p' && t.text == s {
		p.pos++
		return true
	}
	return false
}

func (p *parser) or() (condFn, error) {
	left, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.keyword("OR") {
		right, err := p.and()
		if err != nil {
			return nil, err
		}
		l := left
		left = func(it map[string]types.AttributeValue) bool { return l(it) || right(it) }
	}
	return left, nil
}

func (p *parser) and() (condFn, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.keyword("AND") {
		right, err := p.unary()
		if err != nil {
			return nil, err
		}
		l := left
		left = func(it map[string]types.AttributeValue) bool { return l(it) && right(it) }
	}
	return left, nil
}

func (p *parser) unary() (condFn, error) {
	if p.keyword("NOT") {
		c, err := p.unary()
		if err != nil {
			return nil, err
		}
		return func(it map[string]types.AttributeValue) bool { return !c(it) }, nil
	}
	if p.punct("(") {
		c, err := p.or()
		if err != nil {
			return nil, err
		}
		if !p.punct(")") {
			return nil, fmt.Errorf("missing )")
		}
		return c, nil
	}
	for _, fn := range []string{"attribute_exists", "attribute_not_exists"} {
		if !p.keyword(fn) {
			continue
		}
		if !p.punct("(") {
			return nil, fmt.Errorf("%s needs (", fn)
		}
		t, err := p.next()
		if err != nil {
			return nil, err
		}
		path, err := p.env.path(t)
		if err != nil {
			return nil, err
		}
		if !p.punct(")") {
			return nil, fmt.Errorf("%s takes one attribute", fn)
		}
		want := fn == "attribute_exists"
		return func(it map[string]types.AttributeValue) bool { _, ok := it[path]; return ok == want }, nil
	}
	if p.keyword("begins_with") {
		return p.beginsWith()
	}
	left, err := p.operand()
	if err != nil {
		return nil, err
	}
	t, err := p.next()
	if err != nil {
		return nil, err
	}
	cmp := t.text
	switch {
	case t.kind != 'p':
		return nil, fmt.Errorf("unexpected %q where a comparison was expected", t.text)
	case cmp == "=" || cmp == "<>" || cmp == "<" || cmp == "<=" || cmp == ">" || cmp == ">=":
	default:
		return nil, fmt.Errorf("unsupported operator %q", cmp)
	}
	right, err := p.operand()
	if err != nil {
		return nil, err
	}
	return func(it map[string]types.AttributeValue) bool {
		a, ok1 := left.eval(it)
		b, ok2 := right.eval(it)
		if !ok1 || !ok2 {
			return false // a comparison with a missing attribute is false
		}
		c, comparable := compare(a, b)
		if !comparable {
			return cmp == "<>"
		}
		switch cmp {
		case "=":
			return c == 0
		case "<>":
			return c != 0
		case "<":
			return c < 0
		case "<=":
			return c <= 0
		case ">":
			return c > 0
		}
		return c >= 0
	}, nil
}

// beginsWith parses the arguments of begins_with(path, operand): true when
// both are strings and the attribute starts with the operand (false for a
// missing attribute or another type, as in DynamoDB).
func (p *parser) beginsWith() (condFn, error) {
	if !p.punct("(") {
		return nil, fmt.Errorf("begins_with needs (")
	}
	t, err := p.next()
	if err != nil {
		return nil, err
	}
	path, err := p.env.path(t)
	if err != nil {
		return nil, err
	}
	if !p.punct(",") {
		return nil, fmt.Errorf("begins_with takes two arguments")
	}
	prefix, err := p.operand()
	if err != nil {
		return nil, err
	}
	if !p.punct(")") {
		return nil, fmt.Errorf("begins_with takes two arguments")
	}
	return func(it map[string]types.AttributeValue) bool {
		a, ok1 := it[path].(*types.AttributeValueMemberS)
		v, ok2 := prefix.eval(it)
		b, ok3 := v.(*types.AttributeValueMemberS)
		return ok1 && ok2 && ok3 && strings.HasPrefix(a.Value, b.Value)
	}, nil
}

func (p *parser) operand() (operand, error) {
	t, err := p.next()
	if err != nil {
		return operand{}, err
	}
	if t.kind == ':' {
		v, err := p.env.value(t)
		return operand{value: v}, err
	}
	path, err := p.env.path(t)
	return operand{path: path}, err
}

// compare orders two scalars of the same type (S or N); comparable is false
// for different or other types.
func compare(a, b types.AttributeValue) (c int, comparable bool) {
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		if y, ok := b.(*types.AttributeValueMemberS); ok {
			return strings.Compare(x.Value, y.Value), true
		}
	case *types.AttributeValueMemberN:
		if y, ok := b.(*types.AttributeValueMemberN); ok {
			rx, okx := new(big.Rat).SetString(x.Value)
			ry, oky := new(big.Rat).SetString(y.Value)
			if okx && oky {
				return rx.Cmp(ry), true
			}
		}
	}
	return 0, false
}

// updateAction is one parsed SET or REMOVE.
type updateAction struct {
	path   string
	set    bool
	source operand
}

func parseCondition(expr string, env *exprEnv) (condFn, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, env: env}
	c, err := p.or()
	if err != nil {
		return nil, err
	}
	if t, ok := p.peek(); ok {
		return nil, fmt.Errorf("unexpected %q after the condition", t.text)
	}
	return c, nil
}

func parseUpdate(expr string, env *exprEnv) ([]updateAction, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, env: env}
	var acts []updateAction
	seen := map[string]bool{}
	for {
		if _, ok := p.peek(); !ok {
			break
		}
		set := p.keyword("SET")
		if !set && !p.keyword("REMOVE") {
			t, _ := p.peek()
			return nil, fmt.Errorf("unsupported update clause %q (want SET or REMOVE)", t.text)
		}
		for {
			t, err := p.next()
			if err != nil {
				return nil, err
			}
			path, err := env.path(t)
			if err != nil {
				return nil, err
			}
			if seen[path] {
				return nil, fmt.Errorf("two actions on attribute %s", path)
			}
			seen[path] = true
			a := updateAction{path: path, set: set}
			if set {
				if !p.punct("=") {
					return nil, fmt.Errorf("SET %s needs =", path)
				}
				if a.source, err = p.operand(); err != nil {
					return nil, err
				}
			}
			acts = append(acts, a)
			if !p.punct(",") {
				break
			}
		}
	}
	if len(acts) == 0 {
		return nil, fmt.Errorf("empty update expression")
	}
	return acts, nil
}

// isNameChar reports whether b may appear in a placeholder or attribute
// name.
func isNameChar(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

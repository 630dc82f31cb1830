/*
 * sum_c: an example agrun tool written in C, to show that the guest ABI
 * (guest-sdk/ABI.md) needs nothing but WASI: it reads the call's arguments,
 * {"numbers":[1, 2.5, -3]}, from stdin and prints {"sum":0.5,"count":3} to
 * stdout. On bad input it prints {"error":"..."} to stdout, the message to
 * stderr, and exits 1.
 *
 * Built by scripts/build-examples.sh with
 *   clang --target=wasm32-wasi --sysroot=/usr -O2 -o sum_c.wasm main.c
 * (Debian packages clang, lld, wasi-libc, libclang-rt-14-dev-wasm32).
 *
 * The JSON reader below accepts exactly one object; it understands the
 * "numbers" key (an array of numbers) and skips any other key's value.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT (1 << 20) /* the host sends at most 1 MiB of arguments */
#define MAX_DEPTH 64

static const char *p;   /* read position */
static const char *end; /* end of input */

static void fail(const char *msg) {
	/* msg never contains characters that need escaping in JSON */
	printf("{\"error\":\"%s\"}\n", msg);
	fprintf(stderr, "sum_c: %s\n", msg);
	exit(1);
}

static void ws(void) {
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
}

static int peek(void) { return p < end ? (unsigned char)*p : -1; }

static void expect(char c, const char *msg) {
	ws();
	if (peek() != c)
		fail(msg);
	p++;
}

/* string reads a JSON string; if out is not NULL it stores up to cap-1
 * bytes of it (escapes other than \uXXXX decoded; \uXXXX stored as '?'). */
static void string(char *out, size_t cap) {
	size_t n = 0;
	ws();
	if (peek() != '"')
		fail("invalid arguments: expected a string");
	p++;
	for (;;) {
		if (p >= end)
			fail("invalid arguments: unterminated string");
		unsigned char c = (unsigned char)*p++;
		if (c == '"')
			break;
		if (c < 0x20)
			fail("invalid arguments: control character in string");
		if (c == '\\') {
			if (p >= end)
				fail("invalid arguments: unterminated string");
			char e = *p++;
			switch (e) {
			case '"': case '\\': case '/': c = (unsigned char)e; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u':
				for (int i = 0; i < 4; i++, p++)
					if (p >= end || !((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
						fail("invalid arguments: bad \\u escape");
				c = '?';
				break;
			default:
				fail("invalid arguments: bad escape in string");
			}
		}
		if (out && n + 1 < cap)
			out[n++] = (char)c;
	}
	if (out)
		out[n] = 0;
}

/* number reads a JSON number (strict grammar) and returns its value. */
static double number(void) {
	ws();
	const char *s = p;
	if (peek() == '-')
		p++;
	if (peek() == '0')
		p++;
	else if (peek() >= '1' && peek() <= '9')
		while (peek() >= '0' && peek() <= '9')
			p++;
	else
		fail("invalid arguments: \\\"numbers\\\" must hold only numbers");
	if (peek() == '.') {
		p++;
		if (!(peek() >= '0' && peek() <= '9'))
			fail("invalid arguments: bad number");
		while (peek() >= '0' && peek() <= '9')
			p++;
	}
	if (peek() == 'e' || peek() == 'E') {
		p++;
		if (peek() == '+' || peek() == '-')
			p++;
		if (!(peek() >= '0' && peek() <= '9'))
			fail("invalid arguments: bad number");
		while (peek() >= '0' && peek() <= '9')
			p++;
	}
	char buf[64];
	size_t len = (size_t)(p - s);
	if (len >= sizeof buf)
		fail("invalid arguments: number too long");
	memcpy(buf, s, len);
	buf[len] = 0;
	errno = 0;
	double v = strtod(buf, NULL);
	if (errno == ERANGE && isinf(v))
		fail("invalid arguments: number out of range");
	return v;
}

/* skip reads and discards any JSON value. */
static void skip(int depth) {
	if (depth > MAX_DEPTH)
		fail("invalid arguments: nesting too deep");
	ws();
	int c = peek();
	if (c == '"') {
		string(NULL, 0);
	} else if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		p++;
		ws();
		if (peek() == close) {
			p++;
			return;
		}
		for (;;) {
			if (c == '{') {
				string(NULL, 0);
				expect(':', "invalid arguments: expected ':'");
			}
			skip(depth + 1);
			ws();
			if (peek() == ',') {
				p++;
				continue;
			}
			expect(close, "invalid arguments: expected ',' or a closing bracket");
			return;
		}
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		number();
	} else {
		static const char *words[] = {"true", "false", "null"};
		for (int i = 0; i < 3; i++) {
			size_t n = strlen(words[i]);
			if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0) {
				p += n;
				return;
			}
		}
		fail("invalid arguments: not JSON");
	}
}

/* format writes v as a JSON number: the shortest of %.15g..%.17g that
 * reads back exactly. */
static void format(char *buf, size_t cap, double v) {
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, cap, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

int main(void) {
	static char input[MAX_INPUT + 1];
	size_t n = fread(input, 1, sizeof input, stdin);
	if (ferror(stdin))
		fail("cannot read the arguments from stdin");
	if (n > MAX_INPUT)
		fail("arguments larger than 1 MiB");
	p = input;
	end = input + n;

	double sum = 0;
	long count = 0;
	int seen = 0;
	expect('{', "invalid arguments: expected a JSON object");
	ws();
	if (peek() == '}') {
		p++;
	} else {
		for (;;) {
			char key[32];
			string(key, sizeof key);
			expect(':', "invalid arguments: expected ':'");
			if (strcmp(key, "numbers") == 0) {
				if (seen)
					fail("invalid arguments: duplicate key \\\"numbers\\\"");
				seen = 1;
				expect('[', "invalid arguments: \\\"numbers\\\" must be an array");
				ws();
				if (peek() == ']') {
					p++;
				} else {
					for (;;) {
						sum += number();
						count++;
						ws();
						if (peek() == ',') {
							p++;
							continue;
						}
						expect(']', "invalid arguments: expected ',' or ']' in \\\"numbers\\\"");
						break;
					}
				}
			} else {
				skip(1);
			}
			ws();
			if (peek() == ',') {
				p++;
				continue;
			}
			expect('}', "invalid arguments: expected ',' or '}'");
			break;
		}
	}
	ws();
	if (p != end)
		fail("invalid arguments: unexpected data after the object");
	if (!seen)
		fail("missing argument \\\"numbers\\\"");
	if (!isfinite(sum))
		fail("the sum overflows a 64-bit float");

	char out[64];
	format(out, sizeof out, sum);
	printf("{\"sum\":%s,\"count\":%ld}\n", out, count);
	return 0;
}

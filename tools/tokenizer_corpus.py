"""The tokenizer parity corpus (tests/fixtures/tokenizer/corpus.json).

Hand-written, deterministic: `corpus()` returns the same list of texts on
every run and every Python >= 3.8. Imported by tools/make_tokenizer_fixtures.py.
Every text is a str of Unicode scalar values (no lone surrogates), so it is
valid UTF-8 and a valid Rust String.
"""

# --------------------------------------------------------------------- code
PYTHON = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "import numpy as np\nx = np.arange(10).reshape(2, 5)\nprint(x.T @ x)",
    "class Point:\n    __slots__ = ('x', 'y')\n\n    def __init__(self, x: float, y: float) -> None:\n        self.x, self.y = x, y\n",
    "for i, (k, v) in enumerate(sorted(d.items())):\n\tprint(f\"{i:>3} {k!r}={v:.2f}\")",
    "    # indented comment with trailing spaces   \n    pass",
    "lambda *args, **kwargs: {**kwargs, 'n': len(args)}",
    "with open('data.txt', encoding='utf-8') as f:\n    lines = [l.rstrip('\\n') for l in f if l.strip()]",
    "async def main():\n    await asyncio.gather(*(fetch(u) for u in urls))\n\nasyncio.run(main())",
    "if __name__ == \"__main__\":\n    sys.exit(main(sys.argv[1:]))",
    "x = [i ** 2 for i in range(100) if i % 3 == 0]  # squares",
    "@dataclass(frozen=True)\nclass Config:\n    vocab_size: int = 32_000\n    rope_theta: float = 1e4",
    "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    raise ValueError(\"bad\") from e",
]

RUST = [
    "fn main() {\n    println!(\"Hello, world!\");\n}",
    "pub fn encode(&self, text: &str) -> Result<Vec<u32>, Error> {\n    let mut ids = Vec::with_capacity(text.len() / 4);\n    Ok(ids)\n}",
    "impl<'a, T: Clone + Send + 'static> Iterator for Iter<'a, T> {\n    type Item = &'a T;\n}",
    "let v: Vec<_> = (0..10).map(|x| x * 2).filter(|&x| x > 4).collect();",
    "#[derive(Debug, Clone, PartialEq)]\nenum Token { Word(String), Num(i64), Eof }",
    "match self.peek()? {\n    Some(b'\\n') => self.line += 1,\n    _ => {}\n}",
    "unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), n) }",
    "use std::collections::{HashMap, BTreeSet};\nconst MAX: usize = 1 << 20;",
]

C_CODE = [
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "for (size_t i = 0; i < n; ++i) {\n    dst[i] = src[i] * 0.5f;\n}",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))\n#ifndef NDEBUG\n#endif",
    "struct node *p = malloc(sizeof *p);\nif (!p) { perror(\"malloc\"); exit(1); }",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};  // C++",
]

JS = [
    "const add = (a, b) => a + b;\nconsole.log(add(2, 3));",
    "function greet(name) {\n  return `Hello, ${name}!`;\n}",
    "fetch('/api/v1/users?limit=10')\n  .then(r => r.json())\n  .catch(err => console.error(err));",
    "export default class App extends React.Component {\n  render() { return <div className=\"app\">{this.props.children}</div>; }\n}",
    "let x = a ?? b; x ||= {}; x?.y?.[0] === undefined && !!z;",
    "document.querySelectorAll('.item').forEach((el, i) => el.dataset.idx = i);",
]

SQL = [
    "SELECT id, name, COUNT(*) AS n\nFROM users u\nJOIN orders o ON o.user_id = u.id\nWHERE u.created_at >= '2024-01-01'\nGROUP BY id, name\nORDER BY n DESC\nLIMIT 10;",
    "INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y''s');",
    "CREATE TABLE IF NOT EXISTS logs (\n  id BIGSERIAL PRIMARY KEY,\n  msg TEXT NOT NULL\n);",
    "update accounts set balance = balance - 100.00 where id = 42 returning *;",
]

SHELL = [
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n  echo \"$f\"\ndone",
    "ls -la | grep -v '^d' | awk '{print $9}' > files.txt 2>&1",
    "export PATH=\"$HOME/.cargo/bin:$PATH\" && cargo build --release",
    "find . -name '*.rs' -exec wc -l {} + | sort -n | tail -5",
    "curl -fsSL https://example.com/install.sh | sh -s -- --yes",
    "sudo apt-get update && sudo apt-get install -y build-essential",
]

HTML = [
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Test</title></head>\n<body><p>Hello</p></body>\n</html>",
    "<div class=\"row\"><a href=\"/home\" target=\"_blank\">Home</a> &amp; &lt;more&gt;</div>",
    "<style>\n  body { margin: 0; font-family: sans-serif; }\n  .x > .y:hover { color: #ff0000; }\n</style>",
    "<script>window.onload = () => alert('hi');</script>",
    "<!-- a comment -->\n<br/><img src=\"a.png\" alt=\"\"/>",
]

OTHER_CODE = [
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}",
    "public static void main(String[] args) {\n    System.out.println(\"Hello\");\n}",
    "[package]\nname = \"graphc\"\nversion = \"0.1.0\"\nedition = \"2021\"",
    "steps:\n  - uses: actions/checkout@v4\n  - run: make test\n    env:\n      CI: true",
    "diff --git a/x.py b/x.py\n@@ -1,3 +1,4 @@\n-old line\n+new line\n context",
    "main :: IO ()\nmain = putStrLn \"hello\" >> return ()",
    "(defun square (x) (* x x))",
    "$ x^2 + y^2 = z^2 $ and \\frac{a}{b} \\sum_{i=0}^{n} i",
]

# --------------------------------------------------------------------- numbers
NUMBERS = [
    "2024", "1,234,567.89", "3.14159", "12:30", "2026-12-05", "0", "7", "42", "100", "999",
    "1000", "12345", "123456789", "1234567890123456789012345678901234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "In 2024, the population was 8,118,835,999 people.",
    "Call +1 (555) 123-4567 or 555.987.6543 today.",
    "+44 20 7946 0958", "+49-30-1234567",
    "The meeting is at 12:30 on 2026-12-05 (UTC+01:00).",
    "05/12/2026 and 12/05/2026 and 5.12.2026",
    "Temperatures: -40°C, -3.5°F, +12.75 K",
    "1e-5 2.5E+10 0x1F 0b1010 0o777 1_000_000",
    "v1.2.3-rc.4+build.567", "IPv4 192.168.0.1 and IPv6 2001:db8::ff00:42:8329",
    "$1,299.99 €15,50 £3 ¥1000 ₹2,50,000 ₿0.0001",
    "50% off, 3/4 cup, 1½ tsp, 2³=8, x² + y²",
    "Page 3 of 10; chapter IV; item #7; no. 12",
    "٠١٢٣٤٥٦٧٨٩ (Arabic-Indic digits) and ०१२३४५६७८९ (Devanagari)",
    "１２３４５ full-width digits and ①②③ circled",
    "ISBN 978-3-16-148410-0", "4111 1111 1111 1111",
    "000000000000000000", "10101010101010101010101010101010",
    "a1b2c3d4e5", "abc123def456", "H2O CO2 C6H12O6", "1st 2nd 3rd 4th 21st 101st",
    "3.0.0.0.0.0", "1..2...3....4", "-1 - 1 --1",
]

# --------------------------------------------------------------------- whitespace
WHITESPACE = [
    "", " ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", "  \t ", " \n ", "\t\t\t",
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n",
    " leading space", "  two leading spaces", "\tleading tab", "\nleading newline",
    "trailing space ", "trailing spaces   ", "trailing newline\n", "trailing newlines\n\n\n",
    "  both ends  ", "multiple   inner    spaces", "tab\tseparated\tvalues",
    "line one\nline two\r\nline three\rline four",
    "paragraph one.\n\nparagraph two.\n\n\nparagraph three.",
    "word \n word", "a \t b", "x  \n  y", " \r\n ",
    "non\u00a0breaking\u00a0space", "ideographic\u3000space", "zero\u200bwidth\u200bspace",
    "em\u2003space and thin\u2009space", "line\u2028separator and para\u2029separator",
    "\ufeffbyte order mark at start", "vertical\x0btab and form\x0cfeed",
    " " * 33, "\n" * 20, "\t" * 9 + "x",
]

# --------------------------------------------------------------------- contractions
_CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'d", "'D"]
CONTRACTIONS = ["it" + c for c in _CONTRACTIONS] + [
    "I'M here, DON'T go, YOU'RE late, WE'VE won, SHE'LL see, THEY'D know, IT'S fine",
    "I'm here, don't go, you're late, we've won, she'll see, they'd know, it's fine",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "can't won't shan't ain't y'all o'clock rock'n'roll",
    "The dog's bone and the dogs' bones.",
    "'quoted' and \"double quoted\" and ‘curly’ “quotes” and it’s typographic",
    "It’S, DON’T, I’M (right single quotation mark)",
    "'s 't 're 've 'm 'll 'd",
    "''''''```````\"\"\"\"......!!!!!!??????",
    "Rock 'n' roll isn't dead; 'tis the season; '90s music",
]

# --------------------------------------------------------------------- accents, decomposed forms
ACCENTS = [
    "café", "naïve", "Ångström", "façade", "résumé", "coöperate", "jalapeño", "Zürich", "Straße", "São Paulo",
    "crème brûlée", "Dvořák", "Łódź", "Ελληνικά", "Ærøskøbing", "İstanbul", "ıi İI", "ǅ ǈ ǋ",
    "cafe\u0301", "nai\u0308ve", "A\u030angstro\u0308m", "fac\u0327ade",
    "e\u0301e\u0301e\u0301", "o\u0308\u0304 vs \u022b",
    "\u00c5 vs A\u030a vs \u212b (Angstrom sign)",
    "ﬁ ﬂ ﬀ ligatures", "Ⅻ ⅻ roman numerals", "™ © ® ℃ ℉ №",
    "Mañana será otro día.", "Être ou ne pas être.", "Ça va très bien, merci!",
    "Tiếng Việt có dấu: Hà Nội, Sài Gòn, phở bò.", "Türkçe: ağaç, çiçek, ğüşöç",
    "Polski: zażółć gęślą jaźń", "Čeština: příliš žluťoučký kůň úpěl ďábelské ódy",
]

# --------------------------------------------------------------------- scripts
SCRIPTS = [
    "你好，世界！", "我想在apple工作1314151天～", "中华人民共和国成立于1949年10月1日。",
    "机器学习是人工智能的一个分支。", "繁體中文：臺灣、香港、澳門。",
    "こんにちは世界", "日本語のテキストです。カタカナとひらがなと漢字。", "東京タワーは333メートルです。",
    "ｱｲｳｴｵ half-width katakana", "안녕하세요 세계", "한국어 텍스트입니다. 서울특별시 2024년",
    "مرحبا بالعالم", "اللغة العربية جميلة جدا.", "النص العربي مع أرقام 123 و ٤٥٦",
    "שלום עולם", "עברית: ספר, בית, ילד.", "mixed עברית and English in one line",
    "नमस्ते दुनिया", "हिन्दी भाषा में लिखा गया वाक्य।", "ক্ষ ত্র জ্ঞ (Bengali conjuncts)",
    "தமிழ் மொழி", "สวัสดีชาวโลก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "ກາງ ລາວ",
    "Привет, мир!", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "нещо на Български", "Україна, їжак, ґанок", "Γειά σου Κόσμε", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "Ողջույն աշխարհ", "გამარჯობა მსოფლიო", "ሰላም ለዓለም", "ᚠᚢᚦᚨᚱᚲ runes", "ꦲꦤꦕꦫꦏ Javanese",
    "កាន់តែពិសេសអាច", "မြန်မာဘာသာ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉", "𓀀𓀁𓀂 hieroglyphs",
    "𠀀𠀁𠀂 CJK extension B", "Ɐ Ʌ ʃ ʒ ŋ IPA",
]

MIXED = [
    "Hello世界مرحباשלוםПривет",
    "The word 'café' is 咖啡 in Chinese and コーヒー in Japanese.",
    "Python3では、print()関数を使います。",
    "Используйте pip install torch==2.1.0 для установки.",
    "数学公式 E=mc² 和 a²+b²=c²",
    "emoji😀in-between世界text",
    "camelCaseWordsAndSnake_case_words and kebab-case-words",
    "HTTPServerError XMLHttpRequest getHTTPResponseCode iOS macOS",
    "ALLCAPS lowercase MiXeD CaSe",
    "the the the the the",
]

# --------------------------------------------------------------------- emoji
EMOJI = [
    "😀", "😀😃😄😁", "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙",
    "👨\u200d👩\u200d👧\u200d👦 family", "👩\u200d💻 woman technologist", "🏳\ufe0f\u200d🌈 rainbow flag",
    "🇫🇷 🇯🇵 🇺🇸 🇩🇪 flags", "🇺🇳🇪🇺", "👍🏻 👍🏼 👍🏽 👍🏾 👍🏿", "🧑🏽\u200d🚀 astronaut",
    "❤️ ❤ ♥️ heart variants", "1️⃣ 2️⃣ #️⃣ keycaps", "☕ ☀️ ⭐ ⚡", "🙂" * 10,
    "I love 🍕 and 🍣!", "Done ✔️ Failed ❌ Warning ⚠️",
]

# --------------------------------------------------------------------- combining marks
COMBINING = [
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308",
    "\u0301 leading combining mark", "x\u20dd enclosing circle", "q\u0323\u0307 dot below and above",
    "का कि की कु कू", "e\u0301\u0327 multiple marks",
]

# --------------------------------------------------------------------- punctuation, symbols
PUNCT = [
    "!!!", "???", "...", "…", "?!?!", "------======", "<<<>>>", "***bold***", "___", "~~~",
    "!@#$%^&*()_+-=[]{}|;':\",./<>?`~", "—–-", "«guillemets» „German“ 「Japanese」 『brackets』",
    "。、！？：；（）【】", "¿Qué? ¡Hola!", "a.b.c", "a,b;c:d", "(((nested)))", "[x](y)", "{a: [1, {b: 2}]}",
    "->=> <= >= != == === !== :: ... ..= |> <|", "/* */ // # -- %% ;;", "\\\\server\\share\\path",
    "•◦▪▫■□●○", "←↑→↓↔ ⇒ ⇔ ∀∃∈∉∑∏√∞≈≠≤≥", "§¶†‡", "\x07bell \x1b[31mred\x1b[0m", "a\x00b nul",
]

# --------------------------------------------------------------------- URLs, emails
WEB = [
    "https://www.example.com/path/to/page?query=1&other=two#section",
    "http://localhost:8080/api/v2/items/42",
    "ftp://files.example.org/pub/file.tar.gz",
    "https://github.com/ggml-org/llama.cpp/blob/master/src/llama-vocab.cpp#L100-L200",
    "Visit www.example.co.uk or https://例え.jp/パス for more.",
    "mailto:someone@example.com", "john.doe+tag@sub.example.org",
    "Contact: alice_smith99@mail.example.com, bob@例子.公司",
    "user:pass@host.com:22", "@username #hashtag $TICKER",
    "file:///C:/Users/Name/Documents/report.pdf", "/usr/local/bin/python3.11",
    "C:\\Program Files\\App\\app.exe",
]

# --------------------------------------------------------------------- markdown, JSON
MARKUP = [
    "# Title\n\n## Subtitle\n\n- item one\n- item two\n  - nested\n\n1. first\n2. second",
    "**bold** _italic_ `code` ~~strike~~ [link](https://x.y) ![img](a.png)",
    "```python\nprint('hi')\n```\n\n> quote\n> continued",
    "| a | b |\n|---|:-:|\n| 1 | 2 |",
    "---\ntitle: \"Post\"\ndate: 2024-01-01\ntags: [a, b]\n---",
    "{\"name\": \"graphc\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"compiler\"], \"ok\": true, \"n\": null}",
    "{\n  \"a\": 1,\n  \"b\": [1.5, -2e3, \"x\\ny\"],\n  \"c\": {\"d\": \"\\u00e9\"}\n}",
    "[{\"role\": \"user\", \"content\": \"Hi!\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]",
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<root><item id=\"1\"/></root>",
    "key=value\n[section]\nother = \"quoted value\" ; comment",
    "name,age,city\nAlice,30,\"New York, NY\"\nBob,25,London",
]

# --------------------------------------------------------------------- special-token-looking text
# These are encoded as plain text: special-token parsing is off (see the
# generator's docstring). Tokens that a vocabulary marks user-defined / added
# but not special (Qwen's <tool_call>, <think>; Gemma's "\n\n" ...) are still
# matched whole, as both Hugging Face and llama.cpp do.
SPECIAL_LOOKING = [
    "<|im_end|>", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>",
    "text before <|endoftext|> text after", "<s>", "</s>", "<s> [INST] hi [/INST]", "<unk>", "<pad>",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<eos>", "<mask>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|eom_id|> <|python_tag|> <|reserved_special_token_0|>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|im_end", "im_end|>", "<| im_end |>",
    "<0x41> <0x0A>", "[PAD151700] [multimodal]", "<start_of_image> <unused0>",
    "<repo_name>graphc<file_sep>main.rs", "<reponame> <filename> <gh_stars>",
]

# --------------------------------------------------------------------- long, repeated
LONG = [
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
    "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch",
    "supercalifragilisticexpialidocious" * 3,
    "a" * 64, "A" * 40, "ab" * 40, "abc" * 30, "=" * 80, "-" * 50, "." * 40, "_" * 33, "#" * 20, "0" * 50,
    "9" * 31, "ha" * 25, "lol" + "o" * 30 + "l", "zzz" + "Z" * 20, "x" * 200,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa b",
    "ThisIsAVeryLongIdentifierNameThatKeepsGoingAndGoingWithoutAnySpacesOrPunctuationAtAll",
    "一二三四五六七八九十" * 5, "あ" * 30, "😀" * 20, "\u0301" * 10,
    "word " * 40, "Ab1" * 20,
]

# --------------------------------------------------------------------- prose
PROSE = [
    "Hello world", "Hello World", "hello world", "HELLO WORLD", " Hello world", "Hello world.",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG.",
    "The capital of France is", "Give me three tips for staying focused while studying.",
    "Once upon a time, in a land far, far away, there lived a king who had three daughters.",
    "Tokenization is the process of splitting text into tokens; it's surprisingly subtle!",
    "\"I can't believe it,\" she said. \"It's 3 a.m. and you're still awake?\"",
    "Mr. Smith, Dr. Jones, and Mrs. O'Brien met at 5 p.m. on Jan. 3rd.",
    "e.g. i.e. etc. vs. U.S.A. Ph.D.",
    "The water cycle describes how water moves between the oceans, the air, the land and living things.",
    "Water vapor is invisible and lighter than dry air, so moist air tends to rise.\n\nAs it climbs, the pressure around it falls.",
    "A man, a plan, a canal: Panama!",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.",
    "To be, or not to be, that is the question:",
    "She sells seashells by the seashore.",
    "Q: What is 2+2?\nA: 4.",
    "User: hi\nAssistant: Hello! How can I help you today?",
    "Summarize the following text in one sentence:\n\n",
    "Translate to French: \"Where is the library?\"",
    "Step 1: Preheat the oven to 180°C.\nStep 2: Mix the flour and sugar.\nStep 3: Bake for 25 minutes.",
    "Dear Sir or Madam,\n\nI am writing to inquire about the position.\n\nSincerely,\nJane",
    "TODO: fix this!!! FIXME?? XXX",
    "#include", "import", "return", "self", "def", " def", "  def", "\tdef", "\ndef", "in", " in", "  in",
]


GROUPS = [
    ("code_python", PYTHON), ("code_rust", RUST), ("code_c", C_CODE), ("code_js", JS), ("code_sql", SQL),
    ("code_shell", SHELL), ("code_html", HTML), ("code_other", OTHER_CODE), ("numbers", NUMBERS),
    ("whitespace", WHITESPACE), ("contractions", CONTRACTIONS), ("accents", ACCENTS), ("scripts", SCRIPTS),
    ("mixed", MIXED), ("emoji", EMOJI), ("combining", COMBINING), ("punctuation", PUNCT), ("web", WEB),
    ("markup", MARKUP), ("special_looking", SPECIAL_LOOKING), ("long", LONG), ("prose", PROSE),
]


def corpus_with_groups():
    """[(group, text)] in corpus order; duplicates (an identical text in two groups) are an error."""
    out, seen = [], {}
    for group, texts in GROUPS:
        for t in texts:
            if t in seen:
                raise ValueError(f"duplicate corpus text {t!r} (groups {seen[t]} and {group})")
            seen[t] = group
            out.append((group, t))
    return out


def corpus():
    return [t for _, t in corpus_with_groups()]


if __name__ == "__main__":
    import collections
    c = corpus_with_groups()
    print(len(c), collections.Counter(g for g, _ in c))

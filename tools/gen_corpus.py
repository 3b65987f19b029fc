#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/corpus.txt, the tokenizer oracle corpus.

The passages below were written for this corpus. The generator recombines
them with a seeded RNG (sentence order, digit runs, odd white space, CRLF
sections, casing) until the file passes 100 KB, so the output is
reproducible: `python3 tools/gen_corpus.py > tests/fixtures/tokenizer/corpus.txt`.

Characters are kept to Unicode 14 and older for letters, marks, digits and
spaces: PCRE2 10.42 knows Unicode 14, the Rust regex tables in tiktoken are
newer, and a letter assigned later would differ for reasons that have
nothing to do with the tokenizer.
"""
import random
import sys

SEED = 20260529

ENGLISH = """\
The lighthouse keeper's log was kept in pencil, because ink froze in January. He wrote the wind first, then the sea, then anything else that seemed worth a line.
It's not that we didn't try; we'd simply run out of rope, daylight and patience, in roughly that order.
"You'll see," she said, "the bridge won't open until the tide's turned." I'M NOT CONVINCED, he wrote back, IT'S BEEN SHUT SINCE TUESDAY.
They've measured the room twice: 4.27 m by 3.9 m, with a ceiling of 2,450 mm and one window that doesn't close.
On 2024-03-17 at 06:45 UTC the pressure dropped to 987.6 hPa; by noon it had recovered to 1003 hPa.
She'll bring the maps, he'll bring the stove, and we'LL all pretend the forecast is wrong.
Shipping costs $12.99 (or £10.50, or €11.75); orders over $100 ship free, which isn't much comfort if you need one bolt.
A well-formed sentence doesn't need to be long. Short ones work. So do fragments.
Mr. O'Neill's dog—a grey lurcher named Biscuit—has eaten three gloves, one sock and most of a crossword.
We're told the train is "on time," which, in this town, means within the same afternoon.
The committee's report (pp. 14–22) recommends replacing the boiler, repainting the hall, and hiring someone who can read the meter.
I'd rather walk 10 km in the rain than wait 40 minutes for a bus that's "due."
Naïve café owners in Zürich serve crème brûlée to über-serious coölperators, or so the joke goes.
WHAT'S THE POINT OF A SIGN THAT SAYS "NO SIGNS"? Nobody's answered that yet.
Don't forget: the meeting moved from Room 101 to Room 11B, and the projector's still broken.
You've got 3 new messages, 12 unread notifications and 1,024 emails you'll never open.
Her grandmother's recipe calls for "a handful" of flour, "some" butter, and "enough" patience.
At 0.5 seconds per frame the animation takes 3 min 20 s, which is 200 s, which is too long.
Most people don't read footnotes.¹ Some people read only footnotes.² Both groups are wrong.³
"""

CODE_C = """\
/* ring buffer: single producer, single consumer */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ring {
\tuint8_t *buf;
\tsize_t cap;            /* power of two */
\t_Atomic size_t head;   // written by the producer
\t_Atomic size_t tail;   // written by the consumer
} ring;

static inline size_t ring_used(const ring *r) {
\treturn atomic_load_explicit(&r->head, memory_order_acquire) -
\t       atomic_load_explicit(&r->tail, memory_order_relaxed);
}

int ring_push(ring *r, const void *src, size_t n) {
\tif (r->cap - ring_used(r) < n) return -1;
\tsize_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
\tfor (size_t i = 0; i < n; i++) r->buf[(h + i) & (r->cap - 1)] = ((const uint8_t *)src)[i];
\tatomic_store_explicit(&r->head, h + n, memory_order_release);
\treturn 0;
}

#define MAX(a, b) ((a) > (b) ? (a) : (b))
int main(int argc, char **argv) {
\tchar line[256];
\tprintf("%s: %d args, 0x%08X, %.3f\\n", argv[0], argc, 0xDEADBEEFu, 3.14159);
\twhile (fgets(line, sizeof line, stdin) && line[0] != '\\n') { /* skip */ }
\treturn argc > 1 ? 0 : 1;
}
"""

CODE_PY = """\
from __future__ import annotations

import dataclasses
import re
from typing import Iterator

WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")


@dataclasses.dataclass(frozen=True)
class Span:
    start: int
    end: int
    label: str = "word"

    def __len__(self) -> int:
        return self.end - self.start


def spans(text: str) -> Iterator[Span]:
    \"\"\"Yields the words of text, contractions included ("don't" is one).\"\"\"
    for m in WORD.finditer(text):
        yield Span(m.start(), m.end())


if __name__ == "__main__":
    sample = "It's 9 o'clock and we haven't eaten since 12:30."
    for s in spans(sample):
        print(f"{s.start:>3}..{s.end:<3} {sample[s.start:s.end]!r} ({len(s)} chars)")
    totals = {k: v ** 2 for k, v in zip("abc", range(1, 4))}
    assert totals == {'a': 1, 'b': 4, 'c': 9}, totals
"""

CODE_JSON = """\
{
  "id": "evt_01HZX7Q2K9",
  "created": 1717171717,
  "amount": {"value": 129900, "currency": "JPY", "display": "¥129,900"},
  "tags": ["café", "naïve", "東京", "서울", "Москва", "🚀"],
  "escaped": "line1\\nline2\\t\\"quoted\\" \\u00e9\\u4e2d",
  "nested": {"a": [1, 2.5, -3e-7, true, false, null], "b": {}},
  "empty_string": "",
  "path": "C:\\\\Users\\\\demo\\\\Documents\\\\report (final) v2.docx"
}
"""

SHELL = """\
$ curl -sS -X POST https://api.example.com/v1/items?limit=50&sort=-created \\
    -H 'Content-Type: application/json' -d '{"name":"test","qty":3}'
$ grep -rn --include='*.c' 'TODO\\|FIXME' src/ | wc -l
$ awk -F'\\t' '$3 > 100 {print $1}' data.tsv | sort -u | head -n 20
| name      | qty | price  |
|-----------|----:|-------:|
| widget    |  12 |   3.50 |
| gadget    |   7 |  12.00 |
Contact: jane.doe+filter@example.org, https://example.org/a/b/c?q=%E4%B8%AD&x=1#frag
Regex: ^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@[A-Z]{2,}$ and /\\d{3}-\\d{4}/g
"""

CHINESE = """\
今天早上下了一场小雨，路边的梧桐叶子被洗得发亮。
图书馆三楼的阅览室很安静，只能听见翻书的声音和窗外的鸟叫。
他在《城市笔记》里写道：「一座城市的性格，藏在它的早餐里。」
我们约好下午三点在老地方见面，可是他迟到了整整四十分钟！
这本书一共有十二章，每章大约两万字，读完需要一个星期左右。
茶馆的老板说：“好茶要慢慢喝，急不得。”于是我们又坐了一个小时。
会议纪要（第三稿）已经发到各位的邮箱，请在周五之前提出修改意见。
春天来了，公园里的樱花、桃花和杏花都开了；游人很多，拍照的人更多。
价格从原来的１２８元降到了９９元，优惠活动持续到本月底。
“你知道吗？”她问，“这条河以前叫什么名字？”没有人回答。
一、准备材料；二、检查设备；三、开始实验；四、记录数据。
天气预报说明天有大风，气温会下降五到八度，请大家注意保暖。
"""

JAPANESE = """\
東京駅から新幹線に乗って、京都まで約二時間十五分です。
昨日はラーメン屋さんで味噌ラーメンを食べました。とても美味しかったです！
「すみません、この近くにコンビニはありますか？」と聞かれました。
日々の小さな出来事を、ノートに少しずつ書き留めています。
プログラミング言語のＰｙｔｈｏｎとＣを勉強中です。来週はテストがあります。
桜の季節になると、人々は公園に集まってお花見を楽しみます。
コーヒーを一杯ください。ミルクと砂糖はいりません。
彼は「明日また来ます」と言って、静かに部屋を出て行った。
"""

KOREAN = """\
오늘은 날씨가 정말 좋네요. 우리 같이 공원에 산책하러 갈까요?
서울에서 부산까지 기차로 약 두 시간 반이 걸립니다.
이 책은 한국의 전통 음식에 대한 이야기를 담고 있습니다.
회의는 오후 3시에 시작해서 5시 30분에 끝났습니다.
"감사합니다!" 그녀는 웃으면서 말했다. 그리고 문을 닫았다.
"""

CYRILLIC_GREEK = """\
Вчера вечером мы гуляли по набережной и разговаривали о книгах, музыке и погоде.
Поезд отправляется в 7:40 с третьего пути; не опаздывайте, пожалуйста!
Київ — столиця України; тут багато парків, мостів і старовинних церков.
«Без труда не вытащишь и рыбку из пруда», — сказала бабушка.
Η θάλασσα ήταν ήρεμη και ο ουρανός καθαρός· ξεκινήσαμε νωρίς το πρωί.
Ο Σωκράτης έλεγε ότι «ἓν οἶδα ὅτι οὐδὲν οἶδα».
"""

RTL = """\
مرحبًا بكم في المكتبة العامة، نتمنى لكم وقتًا ممتعًا.
السَّلَامُ عَلَيْكُمْ وَرَحْمَةُ اللَّهِ وَبَرَكَاتُهُ
يبلغ عدد سكان المدينة حوالي ٢٫٥ مليون نسمة (٢٠٢٣).
שלום לכולם! הפגישה תתקיים ביום רביעי בשעה 10:00 בחדר 3.
הספר "סיפורי הים" נכתב בשנת 1998.
"""

INDIC_THAI = """\
नमस्ते! आज मौसम बहुत अच्छा है, चलो बाहर घूमने चलते हैं।
हिन्दी भाषा देवनागरी लिपि में लिखी जाती है; इसमें स्वर, व्यंजन और मात्राएँ होती हैं।
क्षत्रिय, ज्ञान, श्रद्धा और द्वार जैसे शब्दों में संयुक्ताक्षर होते हैं। संख्या: ०१२३४५६७८९
ভালো আছেন? আমি বাংলায় একটু একটু কথা বলতে পারি।
สวัสดีครับ วันนี้อากาศดีมาก เราไปเที่ยวทะเลกันไหม
ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ แต่จะเว้นวรรคระหว่างประโยค
"""

EMOJI = """\
Great job team 🎉🎉🎉 — see you all at the party 🥳!
Family: 👨‍👩‍👧‍👦 👩‍👩‍👦 👨‍👨‍👧‍👧 and a cat 🐈‍⬛ plus a dog 🐕‍🦺.
Thumbs: 👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 — waves: 👋🏻👋🏽👋🏿
Jobs: 👩🏽‍💻 🧑🏿‍🔬 👨🏼‍🚀 👩🏻‍⚕️ 🧑‍🍳
Flags: 🇯🇵 🇰🇷 🇨🇳 🇺🇦 🇧🇷 🏳️‍🌈 🏴‍☠️ — keycaps: 1️⃣ 2️⃣ #️⃣ *️⃣
Hearts ❤️🧡💛💚💙💜🖤🤍 and ✨sparkles✨ and ☕ coffee.
Melting face 🫠, salute 🫡, and a text-style ☺ versus emoji-style ☺️.
"""

COMBINING = """\
Decomposed: cafe\u0301, nai\u0308ve, re\u0301sume\u0301, Zu\u0308rich, n\u0303.
Precomposed: café, naïve, résumé, Zürich, ñ.
Vietnamese: Tiếng Việt có nhiều dấu: ả, ẫ, ặ, ệ, ổ, ừ, ữ, ỵ. Hà Nội, Đà Nẵng.
Stacked: a\u0300\u0301\u0302\u0303 o\u0308\u0304 e\u0327\u0306 Z\u0336\u0337a\u0334l\u0335g\u0338o\u0340.
Lone marks after space and digits: \u0301x 9\u0301 .\u0300 \u20dd.
Ligatures and letterlike: ﬁle ﬂow Ⅻ ½ ⅓ ² ³ ① ② K Å ℃ № ™.
Titlecase digraphs: ǅemal, ǈubljana, ǋegoš, ǲ.
"""

NUMBERS = """\
Phone: +1 (555) 010-9999, +81-3-1234-5678, 0049 30 901820.
Serials: 00000000000000000000, 1234567890123456789012345, 31415926535897932384626.
Versions 1.2.3, 10.0.19045.3693, v2.14.0-rc.1+build.5678.
Hex 0x7fffffff, 0b1010_1010, 1e-9, 6.022e23, -273.15°C.
Fullwidth ０１２３４５６７８９ and Arabic-Indic ٠١٢٣٤٥٦٧٨٩ and Devanagari ०१२३.
"""

WHITESPACE = [
    "tab\tseparated\tvalues\t\there\n",
    "non\u00a0breaking\u00a0spaces and ideographic\u3000space\u3000here\n",
    "trailing spaces   \n",
    "trailing tabs\t\t\n",
    "   leading spaces\n",
    "\tleading tab\n",
    "thin\u2009space, narrow\u202fno-break, em\u2003space, zero\u200bwidth\n",
    "\n\n\n",
    "    \n",
    "mixed \t \u00a0 \u3000 run\n",
    "form\u000cfeed and vertical\u000btab\n",
    "ogham\u1680space and mongolian\u180evowel separator\n",
    "line\u2028separator and paragraph\u2029separator\n",
]


def sentences(block):
    return [l for l in block.split("\n") if l]


def digit_run(rng):
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))


def vary(rng, line):
    r = rng.random()
    if r < 0.05:
        line = line.upper()
    elif r < 0.08:
        line = line.lower()
    if rng.random() < 0.1:
        line += " " * rng.randint(1, 4)
    if rng.random() < 0.1:
        words = line.split(" ")
        k = rng.randrange(len(words))
        words.insert(k, digit_run(rng))
        line = " ".join(words)
    if rng.random() < 0.05:
        line = "\t" + line
    return line


def main():
    rng = random.Random(SEED)
    prose = [ENGLISH, CHINESE, JAPANESE, KOREAN, CYRILLIC_GREEK, RTL, INDIC_THAI, EMOJI,
             COMBINING, NUMBERS]
    code = [CODE_C, CODE_PY, CODE_JSON, SHELL]
    out = []
    size = 0
    rounds = 0
    while size < 110_000 or rounds < 3:
        rounds += 1
        blocks = []
        for b in prose:
            lines = sentences(b)
            rng.shuffle(lines)
            n = rng.randint(max(1, len(lines) // 2), len(lines))
            blocks.append("\n".join(vary(rng, l) for l in lines[:n]) + "\n")
        # a mixed-script paragraph: sentences from all the prose sections
        pool = [l for b in prose for l in sentences(b)]
        blocks.append(" ".join(rng.choice(pool) for _ in range(rng.randint(4, 10))) + "\n")
        blocks.append(rng.choice(code))
        blocks.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(2, 6))))
        rng.shuffle(blocks)
        for b in blocks:
            if rng.random() < 0.15:  # a Windows-edited section
                b = b.replace("\n", "\r\n")
            out.append(b)
            out.append("\n" if rng.random() < 0.7 else "\n\n")
            size += len(b.encode("utf-8")) + 1
    sys.stdout.buffer.write("".join(out).encode("utf-8"))


if __name__ == "__main__":
    main()

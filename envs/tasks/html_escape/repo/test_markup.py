from markup import escape_html


def test_plain_text_unchanged():
    assert escape_html("hello world") == "hello world"


def test_ampersand():
    assert escape_html("fish & chips") == "fish &amp; chips"


def test_tags_are_escaped_once():
    assert escape_html("<b>") == "&lt;b&gt;"


def test_quotes():
    assert escape_html("say \"hi\" & 'bye'") == "say &quot;hi&quot; &amp; &#x27;bye&#x27;"

"""Script for the instructor's browser, as learners wrote it (review 1 of the first probe; W1, N8, N9
of the second, hub-probe-2.md): cells of the attacker's graded notebook, what the formgrader's
page must not carry, and a page's script in the attacker's origin. test_hub.py puts the cells in the
notebook, checks the page as text, and opens it in the instructor's Chromium (instructor_browser);
autograder/tests/test_render_safe.py tries the same routes through nbgrader's templates alone."""
import re

# 1, W1, N8 --------------------------------------------------------------------------------------
PWNED = "document.body.setAttribute('data-pwned', '{}')"
# N8: a markdown link to javascript: (bleach saw the source, where it is text), which the instructor clicks.
XSS_MARKDOWN = (f'xss-probe <img src=x onerror="{PWNED.format("markdown")}">\n\n'
                f"[click A](javascript:{PWNED.format('md-js-link')})\n")
PROOF = "xss5-proof-by-learner.txt"  # W1's script writes this file in the instructor's home, as the instructor
# W1: what an 8-byte PNG's `width` metadata became in nbconvert's template (an unquoted attribute: onerror),
# and the same through `height` and a JPEG; the script puts a file in the instructor's home through
# the instructor's own API, as the review's did.
W1_SCRIPT = ("var m=document.cookie.match(/_xsrf=([^;]+)/);"
             "fetch(location.pathname.split('/formgrader')[0]+'/api/contents/" + PROOF + "',{method:'PUT',"
             "headers:{'Content-Type':'application/json','X-XSRFToken':m?decodeURIComponent(m[1]):''},"
             "body:JSON.stringify({type:'file',format:'text',content:'written by a learner script in the formgrader'})})"
             ".then(function(r){document.body.setAttribute('data-pwned','png-width-takeover-'+r.status)});")
XSS_OUTPUT = ("import base64\n"
              "from IPython.display import HTML, Javascript, display\n"
              f"display(HTML('<img src=x onerror=\"{PWNED.format('html output')}\"><script>"
              f"{PWNED.format('script output')}</script>'))\n"
              f"display(Javascript(\"{PWNED.format('javascript output')}\"))\n"
              f"js = base64.b64encode({W1_SCRIPT!r}.encode()).decode()\n"
              "for mime, key in (('image/png', 'width'), ('image/png', 'height'), ('image/jpeg', 'width')):\n"
              "    display({mime: 'iVBORw0KGgo=', 'text/plain': 'plot'}, raw=True,\n"
              "            metadata={mime: {key: '1 onerror=eval(atob(this.alt))', 'alt': js}})\n")


# N9: in a page of the learner's origin (a page their server serves, a script of theirs in their lab),
# the review's attack: open the instructor's formgrader, take its _xsrf cookie, write with it through
# the instructor's API (absolute URL, and the path, as on a single origin). Run in the instructor's
# Chromium by test_hub.instructor_browser; what it got back.
ORIGIN_PROOF = "origin-proof-by-learner.txt"
ORIGIN_PROBE = """async ({teacher, proof}) => {
  const out = {cookie: null, error: null, put: null, fetchErrors: []};
  const w = window.open(teacher + '/formgrader/', 'x');
  await new Promise(r => setTimeout(r, 3000));
  try { out.cookie = w.document.cookie; } catch (e) { out.error = String(e); }
  const m = (out.cookie || '').match(/_xsrf=([^;]+)/);
  const body = JSON.stringify({type: 'file', format: 'text', content: 'written by a page in a learner origin'});
  const path = new URL(teacher).pathname;
  for (const url of [teacher + '/api/contents/' + proof, path + '/api/contents/' + proof]) {
    try {
      const r = await fetch(url, {method: 'PUT', credentials: 'include', body,
        headers: {'Content-Type': 'application/json', 'X-XSRFToken': m ? decodeURIComponent(m[1]) : ''}});
      out.put = Math.max(out.put || 0, r.status);
    } catch (e) { out.fetchErrors.push(String(e)); }
  }
  try { w.close(); } catch (e) {}
  return out;
}"""


def submission_id(hub, call, stem, learner) -> str:
    listed = call(hub, hub.instructor, "GET", f"/formgrader/api/submitted_notebooks/{stem}/{stem}")
    return next(s["id"] for s in listed if s["student"] == learner)


def formgrader_page_has_no_script(page: str) -> list[str]:
    """The learner's script that survived as markup in the formgrader's page of their submission (the
    cell's source is shown too, escaped: `&lt;img ... onerror=` there is text, not an element)."""
    found = re.findall(r"<[a-z]+[^>]*\son[a-z]+\s*=[^>]*>", page, flags=re.I)  # any element with a handler
    found += re.findall(r"<script[^>]*>[^<]*data-pwned[^<]*</script>", page, flags=re.I)
    found += re.findall(r"<a[^>]*href=[\"']?\s*javascript:[^>]*>", page, flags=re.I)
    return found

// Render the ```mermaid fences of a page with the mermaid.min.js served by this site (no CDN).
// The fence is a <div class="diagram-src"> (not class "mermaid", which the theme would load from a CDN
// and render into a closed shadow root); the SVG goes straight into the article, so tests can find it.
(function () {
  let count = 0;
  async function render() {
    if (typeof mermaid === "undefined") {
      console.error("mermaid.min.js did not load");
      return;
    }
    mermaid.initialize({ startOnLoad: false, theme: "neutral", securityLevel: "strict",
                         fontFamily: "system-ui, sans-serif", sequence: { mirrorActors: false } });
    for (const el of document.querySelectorAll("div.diagram-src:not([data-rendered])")) {
      const { svg } = await mermaid.render(`diagram-${count++}`, el.textContent);
      el.innerHTML = svg;
      el.setAttribute("data-rendered", "1");
      el.classList.add("diagram");
    }
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(render);  // the theme's page observable (also fires on instant navigation)
  } else {
    document.addEventListener("DOMContentLoaded", render);
  }
})();

"""Zoom on a window's timeline: the page's one inline script, vanilla JavaScript with no dependency.

Each figure holding a ``svg.chart.timeline`` zooms as one: the timeline and the memory curve under it share their time
axis, so the wheel, a drag (select a range), the ``+``/``-`` keys and the arrows (when the timeline has the focus)
change the range of both; a double-click, ``0``/Escape or the *reset zoom* button brings back the window's full range.
Every value comes from what the page already draws (each axis' ``data-lo``/``data-hi``/``data-x0``/``data-x1`` turn
a bar's pixels back into milliseconds), so zoom adds no data to the page. When zoomed, the axes' ``data-lo`` and
``data-hi`` hold the range shown and the ticks are redrawn for it; bars outside the range are hidden
(``display: none``), bars across an edge are cut at it, and the memory lines are clipped to the plotting area. The
script does nothing at load but add the button and its hint: the bars are read on the first zoom.
"""

from __future__ import annotations

ZOOM_JS = r"""(function(){"use strict";var n=0;
function step(s){var r=s/6,b=Math.pow(10,Math.floor(Math.log10(r)));
for(var m of[1,2,5,10])if(m*b>=r*(1-1e-9))return m*b}
function fmt(v,s){var d=Math.max(0,-Math.floor(Math.log10(s)+1e-9));return String(+v.toFixed(d))}
document.querySelectorAll("figure").forEach(function(fig){
var tl=fig.querySelector("svg.chart.timeline");if(!tl)return;
var svgs=[].filter.call(fig.querySelectorAll("svg.chart"),function(s){return s.querySelector("g.axis")});
var ax0=tl.querySelector("g.axis").dataset,X0=+ax0.x0,X1=+ax0.x1,LO=+ax0.lo,HI=+ax0.hi,PX=X1-X0;
var lo=LO,hi=HI,parts=null,ns=tl.namespaceURI;
function el(p,tag,at){var e=document.createElementNS(ns,tag);for(var k in at)e.setAttribute(k,at[k]);
if(p)p.appendChild(e);return e}
function read(){parts=svgs.map(function(s){var h=+s.getAttribute("height"),id="zc"+(n++),d=el(s,"defs",{});
el(el(d,"clipPath",{id:id}),"rect",{x:X0,y:0,width:PX,height:h});
var g=s.querySelector("g.grid"),a=s.querySelector("g.axis"),f=g&&g.firstElementChild;
return{a:a,g:g,ah:a.innerHTML,dl:a.dataset.lo,dh:a.dataset.hi,gh:g?g.innerHTML:"",gy:f?[f.getAttribute("y1"),
f.getAttribute("y2")]:[0,0],
y:+a.querySelector("line").getAttribute("y1"),
r:[].map.call(s.querySelectorAll(":scope>rect"),function(r){var x=+r.getAttribute("x");
var w=r.getAttribute("width");return[r,val(x),val(x+ +w),r.getAttribute("x"),w]}),
p:[].map.call(s.querySelectorAll("polyline"),function(p){p.setAttribute("clip-path","url(#"+id+")");
var o=p.getAttribute("points");return[p,o.trim().split(/\s+/).map(function(q){var c=q.split(",");
return[val(+c[0]),c[1]]}),o]})}})}
function val(x){return LO+(x-X0)/PX*(HI-LO)}
function X(v){return X0+(v-lo)/(hi-lo)*PX}
function draw(){if(!parts)read();var full=lo===LO&&hi===HI,s=step(hi-lo),ks=Math.ceil(lo/s-1e-9),
ke=Math.floor(hi/s+1e-9);
parts.forEach(function(P){P.a.dataset.lo=full?P.dl:lo;P.a.dataset.hi=full?P.dh:hi;
if(full){P.a.innerHTML=P.ah;if(P.g)P.g.innerHTML=P.gh}else{
var keep=[P.a.querySelector("line"),P.a.querySelector("text.unit")];P.a.replaceChildren(keep[0]);
if(P.g)P.g.replaceChildren();
for(var k=ks;k<=ke;k++){var v=k*s,x=X(v).toFixed(1);
el(P.a,"line",{x1:x,y1:P.y,x2:x,y2:P.y+4,stroke:"#555"});
el(P.a,"text",{x:x,y:P.y+15,"text-anchor":"middle"}).textContent=fmt(v,s);
if(P.g)el(P.g,"line",{x1:x,y1:P.gy[0],x2:x,y2:P.gy[1],stroke:"#eee"})}
P.a.appendChild(keep[1])}
P.r.forEach(function(R){var r=R[0];if(R[2]<=lo||R[1]>=hi){r.style.display="none";return}
var a=X(Math.max(R[1],lo));r.style.display="";r.setAttribute("x",full?R[3]:a.toFixed(2));
r.setAttribute("width",full?R[4]:(X(Math.min(R[2],hi))-a).toFixed(2))});
P.p.forEach(function(L){L[0].setAttribute("points",
full?L[2]:L[1].map(function(q){return X(q[0]).toFixed(1)+","+q[1]}).join(" "))})});
btn.disabled=full}
function zoom(a,b){var w=Math.min(Math.max(b-a,(HI-LO)/500),HI-LO);if(a<LO)a=LO;b=a+w;if(b>HI){b=HI;a=b-w}
lo=Math.max(a,LO);hi=b;draw()}
function reset(){lo=LO;hi=HI;if(parts)draw()}
function at(e,s){var b=s.getBoundingClientRect();return(e.clientX-b.left)*(+s.getAttribute("width")/(b.width||1))}
function inside(x){return x>=X0&&x<=X1}
function ms(x){return lo+(x-X0)/PX*(hi-lo)}
var bar=document.createElement("p"),btn=document.createElement("button");bar.className="zoomctl";
btn.type="button";btn.textContent="reset zoom";btn.disabled=true;btn.onclick=reset;bar.appendChild(btn);
bar.appendChild(document.createTextNode(" wheel or drag across the timeline to zoom, double-click to reset; "+
"with the timeline focused: + and - zoom, arrows pan, 0 resets"));tl.parentNode.insertBefore(bar,tl);
tl.setAttribute("tabindex","0");
tl.addEventListener("keydown",function(e){var w=hi-lo,k=e.key;
if(k==="+"||k==="=")zoom(lo+w/4,hi-w/4);else if(k==="-")zoom(lo-w/2,hi+w/2);
else if(k==="ArrowLeft")zoom(lo-w/5,hi-w/5);else if(k==="ArrowRight")zoom(lo+w/5,hi+w/5);
else if(k==="0"||k==="Escape")reset();else return;e.preventDefault()});
svgs.forEach(function(s){s.style.cursor="crosshair";
s.addEventListener("wheel",function(e){var x=at(e,s);if(!inside(x))return;e.preventDefault();
var f=e.deltaY<0?0.8:1.25,c=ms(x);zoom(c-(c-lo)*f,c+(hi-c)*f)},{passive:false});
s.addEventListener("dblclick",function(e){e.preventDefault();reset()});
s.addEventListener("mousedown",function(e){var x0=at(e,s);if(e.button!==0||!inside(x0))return;e.preventDefault();
var h=s.getAttribute("height"),box=el(s,"rect",{x:x0,y:0,width:0,height:h,fill:"#1565c0","fill-opacity":0.15});
function move(m){var x=Math.min(Math.max(at(m,s),X0),X1);box.setAttribute("x",Math.min(x,x0));
box.setAttribute("width",Math.abs(x-x0))}
function up(m){removeEventListener("mousemove",move);removeEventListener("mouseup",up);box.remove();
var x=Math.min(Math.max(at(m,s),X0),X1);if(Math.abs(x-x0)>3)zoom(ms(Math.min(x,x0)),ms(Math.max(x,x0)))}
addEventListener("mousemove",move);addEventListener("mouseup",up)})})})})();"""
"""The zoom script, inlined once at the end of a page that has a timeline."""


def zoom_script(body: str) -> str:
    """The ``<script>`` element to end ``body`` with: the zoom script when the page has a timeline, else nothing.

    Example:
        >>> zoom_script('<svg class="chart steps">'), zoom_script('<svg class="chart timeline">')[:8]
        ('', '<script>')
    """
    return f"<script>{ZOOM_JS}</script>" if '<svg class="chart timeline"' in body else ""

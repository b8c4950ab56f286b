//! The play page: HTML, CSS and script in one string, served as it is (no build step, no
//! network at run time). It fits 1280×800.

/// The page.
pub(super) const PAGE: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>retrysim play</title>
<style>
*{box-sizing:border-box}
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1b1b1b;background:#fff;height:100vh;display:flex;flex-direction:column}
header{padding:8px 14px;background:#f4f4f6;border-bottom:1px solid #ddd;flex:none}
h1{font-size:17px;margin:0 0 4px}
h2{font-size:14px;margin:8px 0 4px}
code{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;background:#fff;border:1px solid #ddd;padding:1px 4px;word-break:break-all}
.bar{display:flex;gap:10px;align-items:center;flex-wrap:wrap;margin:2px 0}
.bar input{font:inherit;width:6em}
#tape{display:inline-block;max-width:24em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}
.bounds{font-size:11px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;display:block}
button{font:inherit;padding:3px 9px;cursor:pointer}
#error{color:#a40000;font-weight:600;min-height:1.2em}
#goal.met{color:#0a6b0a;font-weight:600}
main{flex:1;display:flex;gap:10px;padding:8px 14px;min-height:0}
#left{flex:1;display:flex;flex-direction:column;min-width:0;min-height:0}
#table{flex:1;overflow:auto;border:1px solid #eee}
#right{width:430px;flex:none;overflow:auto}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #eee;padding:2px 6px;text-align:left;vertical-align:top;font-size:12.5px}
th{position:sticky;top:0;background:#fafafa}
td.num{color:#777;white-space:nowrap}
td.knows{min-width:11em}
td.knows.same{color:#999}
td.knows.changed{font-weight:600}
tr.event:last-child{background:#fff3c4}
.arrow{white-space:nowrap;font-weight:600}
.lost{color:#a40000}
.crash{color:#a40000;font-weight:600}
#choices button{display:block;width:100%;text-align:left;margin:3px 0;padding:5px 8px;border:1px solid #bbb;background:#fff;border-radius:4px}
#choices button:hover{background:#eef4ff}
#choices button.seeded{border-color:#2a62c9}
#choices .key{display:inline-block;width:1.6em;font-weight:700;color:#2a62c9}
#choices .mark{float:right;font-size:11px;color:#2a62c9}
#verdict{font-weight:600;margin:0}
#judgedpanel{padding:4px 8px}
#next{width:100%;text-align:left;margin:6px 0 0;padding:5px 8px;border:1px dashed #2a62c9;background:#f7faff;border-radius:4px}
#next .key{float:right;font-weight:700;color:#2a62c9}
#verdict.broken{color:#a40000}
#verdict.clean{color:#0a6b0a}
ul{margin:2px 0;padding-left:18px}
li.broken{color:#a40000}
li.holds{color:#0a6b0a}
body.big{font-size:19px}
body.big h1{font-size:22px}
body.big h2{font-size:19px}
body.big th,body.big td,body.big code,body.big #history{font-size:17px}
body.big #right{width:520px}
#history{max-height:110px;overflow:auto;font-size:12.5px;margin:4px 0 0;border-top:1px solid #eee}
#history li{cursor:pointer}
#history li:hover{text-decoration:underline}
.panel{border:1px solid #ddd;background:#fcfcfc;padding:6px 8px;margin-bottom:8px;border-radius:4px}
.muted{color:#666}
pre{font:11px/1.3 ui-monospace,Menlo,Consolas,monospace;white-space:pre;overflow:auto;max-height:260px;background:#fafafa;border:1px solid #eee;padding:4px}
body[data-busy=true] #choices button{opacity:.5}
@media (max-width:1000px),(max-height:600px){
 header{padding:4px 10px}
 h1{font-size:15px;margin:0 0 2px}
 .bar{margin:0;gap:6px}
 #answersshown,#replaybar,#startbar,#boundsbar,#reach,.keys{display:none}
 #goal{font-size:12px}
 #table table{table-layout:fixed}
 #table th:nth-child(1){width:2.6em}
 #table th:nth-child(2){width:3.6em}
 #table td{overflow-wrap:anywhere}
 main{padding:4px 10px;gap:6px}
 #right{width:300px}
 #history{max-height:48px}
 th,td{font-size:11.5px;padding:1px 3px}
 #choices button{padding:3px 6px;margin:2px 0}
 .panel{padding:4px 6px;margin-bottom:6px}
 h2{margin:2px 0}
}
</style>
</head>
<body data-ready="false">
<header>
<h1 id="title">retrysim play</h1>
<div class="bar"><span id="answersshown">answers <code id="tape"></code></span><span id="where" class="muted"></span>
<button id="undo" title="go back one choice (&#x2190;)">&#x2190; undo</button>
<button id="restart">start again</button>
<a id="diagram" target="_blank" href="/diagram">sequence diagram so far</a>
<button id="bigtype" title="large type, for a projector">large type</button></div>
<div class="bar" id="startbar"><label>seed <input id="seed" inputmode="numeric"></label><button id="fromseed">start from seed</button>
<label>tape <input id="starttape" placeholder="1,0,2"></label><button id="fromtape">start from tape</button></div>
<div class="bar" id="replaybar"><span>replay what is on the screen: <code id="replay"></code></span></div>
<div class="muted bounds" id="boundsbar">bounds: <span id="bounds"></span></div>
<div class="muted" id="reach"></div>
<div class="bar" id="goalbar" hidden><span id="goal" class="muted"></span><span id="goalshortest" hidden>The shortest the check knows: <span id="goalshortestchoices"></span> choices, <span id="goalshortestfaults"></span> fault(s) &mdash; <a id="goalshortestplay" href="/">play it</a></span></div>
<div id="error" role="alert"></div>
</header>
<main>
<div id="left">
<div id="table"></div>
<h2>Choices made <span class="muted">(click one to go back to just before it)</span></h2>
<ol id="history"></ol>
</div>
<div id="right">
<div class="panel" id="judgedpanel"><p id="verdict"></p></div>
<div class="panel"><h2 id="asking">What happens next?</h2><div id="choices"></div>
<button id="next" title="the uneventful answer, past arrivals, kept sessions and crash points, to the next delivery order or time (n)">go on to the next choice that matters <span class="key">n</span></button>
<p class="muted keys">Keys: 1&ndash;9 choose, n goes on to the next choice that matters, s takes the seed's pick, &#x2190; goes back.</p></div>
<div class="panel"><h2>Judged so far</h2><ul id="invariants"></ul></div>
<div class="panel"><h2 id="nowtitle">Now</h2>
<p><b>clock</b> <span id="clock"></span> ms</p>
<p><b>what the clients know</b><br><span id="knows"></span></p>
<p><b>in flight</b></p><ul id="inflight"></ul>
<p><b>the store (committed)</b><br><span id="store"></span></p>
<p><b>intents</b></p><ul id="intents"></ul></div>
<div class="panel" id="shortestpanel" hidden><h2>The shortest the exhaustive check knows</h2>
<p><b><span id="shortestchoices"></span> choices</b> after the workload&rsquo;s, <span id="shortestfaults"></span> fault(s): <a id="shortestplay" href="/">play it</a></p>
<p class="muted">tape <code id="shortesttape"></code>: <code id="shortestreplay"></code></p><pre id="shortest"></pre></div>
<details class="panel"><summary>As <code>retrysim replay</code> prints it</summary><pre id="text"></pre></details>
</div>
</main>
<script>
(function(){
 var query=new URLSearchParams(location.search);
 var seed=query.get('seed'),goal=query.get('goal'),faults=query.get('faults'),system=query.get('system'),bounds=query.get('bounds'),big=query.get('big')==='1';
 var state=null;
 function $(id){return document.getElementById(id);}
 function params(extra){
  var p=new URLSearchParams();
  Object.keys(extra).forEach(function(k){p.set(k,extra[k]);});
  if(seed!==null&&seed!==''){p.set('seed',seed);}
  if(system!==null){p.set('system',system);}
  if(bounds!==null){p.set('bounds',bounds);}
  if(big){p.set('big','1');}
  if(goal!==null){p.set('goal',goal);if(faults!==null){p.set('faults',faults);}}
  return p.toString();
 }
 function text(node,value){node.textContent=value==null?'':String(value);}
 function list(node,items,each){
  node.innerHTML='';
  items.forEach(function(item,i){var li=document.createElement('li');each(li,item,i);node.appendChild(li);});
  if(items.length===0){var li=document.createElement('li');li.className='muted';li.textContent='none';node.appendChild(li);}
 }
 function load(url){
  document.body.dataset.busy='true';
  return fetch(url).then(function(r){return r.json().then(function(body){return {status:r.status,body:body};});})
  .then(function(res){
   document.body.dataset.busy='false';
   if(res.status!==200){
    text($('error'),res.body.error);
    document.body.dataset.errors=String(+(document.body.dataset.errors||0)+1);
    if(res.status===409&&state){load('/state?'+params({answers:state.answers.join(',')}));}
    return;
   }
   text($('error'),'');
   render(res.body);
  }).catch(function(e){
   document.body.dataset.busy='false';
   text($('error'),'the play server did not answer: '+e);
  });
 }
 function render(s){
  if(seed===null){seed=String(s.seed);}
  if(system===null){system=s.title;}
  if(bounds===null){bounds=s.bounds_mark;}
  // Each new position is a page of the browser's history: Back and Forward walk the choices
  // (a position reached by them is already the address shown).
  var shown=new URLSearchParams(location.search).get('answers');
  var url='?'+params({answers:s.answers.join(',')});
  if(state===null||shown===null){history.replaceState(null,'',url);}
  else if(shown!==s.answers.join(',')){history.pushState(null,'',url);}
  state=s;
  $('diagram').href='/diagram?'+params({answers:s.answers.join(',')});
  text($('title'),'retrysim play \u2014 '+s.title);
  document.title='retrysim play: '+s.title;
  text($('tape'),s.tape||'(none)');
  text($('replay'),s.replay);
  text($('bounds'),s.bounds);
  $('boundsbar').title=s.bounds;
  $('tape').title=s.tape;
  $('seed').value=String(s.seed);
  var judged=s.judged;
  text($('where'),(s.over?(s.at-s.setup)+' choices made, the run is over':'choice '+(s.at-s.setup+1))+'; '+(judged.stopped_after_steps==null?judged.steps:judged.stopped_after_steps)+' steps judged');
  $('table').innerHTML=s.table;
  var choices=$('choices');
  choices.innerHTML='';
  if(s.now){
   text($('asking'),s.now.within_step?'What happens next, inside step '+s.now.steps+'?':'What happens next, as step '+(s.now.steps+1)+'?');
   s.now.choices.forEach(function(choice,i){
    var b=document.createElement('button');
    b.dataset.answer=String(choice.answer);
    if(choice.seeded){b.className='seeded';}
    b.innerHTML=(i<9?'<span class="key">'+(i+1)+'</span>':'<span class="key"></span>')+(choice.seeded?'<span class="mark">the seed\u2019s pick</span>':'');
    b.appendChild(document.createTextNode(choice.words));
    b.addEventListener('click',function(){choose(choice.answer);});
    choices.appendChild(b);
   });
  }else{
   text($('asking'),'The run is over.');
  }
  $('next').disabled=!s.now;
  var broken=judged.violations.length>0;
  var verdict=$('verdict');
  verdict.className=broken?'broken':'clean';
  var scope=s.over?'The run ended ('+judged.end+')':'So far (the run stopped after step '+judged.stopped_after_steps+')';
  text(verdict,scope+': '+(broken?judged.violations.map(function(v){return 'VIOLATED '+v.invariant;}).join(', '):'every invariant holds')+'. Faults spent: '+judged.faults+' of '+judged.faults_max+'.');
  list($('invariants'),judged.invariants,function(li,inv){
   li.className=inv.holds?'holds':'broken';
   li.dataset.invariant=inv.name;
   li.textContent=(inv.holds?'\u2713 ':'\u2717 ')+inv.name+(inv.holds?'':': '+inv.why);
   li.title=inv.holds_when;
  });
  text($('nowtitle'),s.over?'At the end':'Now, after step '+judged.stopped_after_steps);
  text($('clock'),s.clock_ms);
  text($('knows'),s.knows||'(nothing sent yet)');
  list($('inflight'),s.in_flight,function(li,m){li.textContent=m;});
  text($('store'),s.store);
  list($('intents'),s.intents,function(li,i){li.textContent=i.intent+' (c'+i.client+') '+i.request+': sent '+i.attempts+'\u00d7, '+i.verdict+'; effects committed: '+i.effects;});
  list($('history'),s.history,function(li,h,i){
   li.textContent=h.kind==='workload'?'set-up: '+h.words:h.words+(h.seeded?'':' (not the seed\u2019s pick)');
   li.addEventListener('click',function(){undoTo(i);});
  });
  text($('text'),judged.text);
  var g=$('goal');
  var panel=$('shortestpanel');
  panel.hidden=true;
  $('goalshortest').hidden=true;
  $('goalbar').hidden=!s.goal;
  if(s.goal){
   g.className=s.goal.met?'met':'muted';
   var aim='Goal: break '+s.goal.invariant+' with at most '+s.goal.faults_most+' fault(s).';
   text(g,s.goal.met?aim+' Done, in '+s.goal.clicks+' choices after the workload\u2019s, with '+s.goal.faults+' fault(s).':aim+(s.goal.why_not?' Not yet: '+s.goal.why_not+'.':''));
   if(s.goal.met&&s.goal.shortest){
    panel.hidden=false;
    text($('shortesttape'),s.goal.shortest.tape);
    var to=s.goal.shortest.answers_to_break;
    text($('shortestchoices'),to?s.goal.shortest.choices:'?');
    var shortestAt=to?'?'+params({answers:to.join(',')}):'';
    $('shortestplay').hidden=!to;
    $('shortestplay').href=shortestAt;
    $('goalshortest').hidden=!to;
    text($('goalshortestchoices'),s.goal.shortest.choices);
    text($('goalshortestfaults'),s.goal.shortest.faults);
    $('goalshortestplay').href=shortestAt;
    text($('shortestfaults'),s.goal.shortest.faults);
    text($('shortestreplay'),s.goal.shortest.replay);
    text($('shortest'),s.goal.shortest.text);
   }
  }else{text(g,'');}
  // The newest row in view, once everything around the table has its size.
  var last=$('table').querySelector('tr.event:last-child');
  if(last){last.scrollIntoView({block:'end'});}
  document.body.dataset.at=String(s.at);
  document.body.dataset.ready='true';
 }
 function choose(answer){
  if(!state||!state.now){return;}
  load('/choose?'+params({answers:state.answers.join(','),at:state.at,choice:answer}));
 }
 function next(){
  if(!state||!state.now){return;}
  load('/next?'+params({answers:state.answers.join(','),at:state.at}));
 }
 function undoTo(count){
  if(!state){return;}
  load('/state?'+params({answers:state.answers.slice(0,Math.max(0,count)).join(',')}));
 }
 $('undo').addEventListener('click',function(){if(state){undoTo(state.at-1);}});
 $('next').addEventListener('click',next);
 $('restart').addEventListener('click',function(){load('/state?'+params({}));});
 $('fromseed').addEventListener('click',function(){seed=$('seed').value.trim();load('/start?'+params({}));});
 $('fromtape').addEventListener('click',function(){load('/start?'+params({tape:$('starttape').value}));});
 document.addEventListener('keydown',function(event){
  if(event.target&&event.target.tagName==='INPUT'){return;}
  if(event.key>='1'&&event.key<='9'){
   var k=+event.key-1;
   if(state&&state.now&&k<state.now.choices.length){choose(k);}
   event.preventDefault();
  }else if(event.key==='ArrowLeft'||event.key==='Backspace'){
   if(state){undoTo(state.at-1);}
   event.preventDefault();
  }else if(event.key==='n'){
   next();
  }else if(event.key==='s'&&state&&state.now){
   var pick=state.now.choices.filter(function(c){return c.seeded;})[0];
   if(pick){choose(pick.answer);}
  }
 });
 document.body.classList.toggle('big',big);
 $('bigtype').addEventListener('click',function(){
  big=!big;
  document.body.classList.toggle('big',big);
  if(state){history.replaceState(null,'','?'+params({answers:state.answers.join(',')}));}
 });
 fetch('/served').then(function(r){return r.json();}).then(function(served){
  text($('reach'),'served on '+served.reached_from);
 }).catch(function(){});
 window.addEventListener('popstate',function(){
  var answers=new URLSearchParams(location.search).get('answers');
  load('/state?'+params({answers:answers||''}));
 });
 if(query.has('tape')){var from={tape:query.get('tape')};if(query.get('to')==='end'){from.to='end';}load('/start?'+params(from));}
 else if(query.has('answers')){load('/state?'+params({answers:query.get('answers')}));}
 else if(query.has('seed')){load('/start?'+params({}));}
 else{load('/state?'+params({}));}
})();
</script>
</body>
</html>
"##;
